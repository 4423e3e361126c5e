// Package deadline is the one time budget a terminating Kubernetes pod has,
// from the moment termination starts (T0: the preStop hook, or SIGTERM when
// there is none) to the SIGKILL the kubelet sends at the end of the grace
// period.
//
// Sandbox servers lose work when their preStop wait and their SIGTERM
// shutdown each assume they own the whole grace period: a preStop hook that
// waits the full hour leaves the kubelet's one-off 2 s for everything else.
// A Budget shared by both, split by a Plan into ordered phases whose
// reserves follow the live work, makes that impossible.
//
// # Typical wiring
//
// At server start, from the pod's terminationGracePeriodSeconds:
//
//	budget, err := deadline.New(3600*time.Second, deadline.Config{Logger: logger})
//	if err != nil {
//		log.Fatal(err) // names the field; NewPlan would only say the budget is nil
//	}
//	pauses := deadline.NewEstimator(20 * time.Second) // fed with observed pause times
//	plan, err := deadline.NewPlan(budget,
//		deadline.Phase{Name: "drain"}, // the preStop wait
//		deadline.Phase{Name: "preserve", Reserve: deadline.Work(runningSandboxes, pauses, concurrency)},
//		deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(30 * time.Second)},
//		deadline.Phase{Name: "exit", Reserve: deadline.Fixed(5 * time.Second)},
//	)
//	if err != nil {
//		log.Fatal(err)
//	}
//
// In the preStop handler:
//
//	budget.OnPreStop(time.Now())
//	budget.Tighten(deletionTimestamp) // kubectl delete --grace-period=30 cuts the hour (package kube reads it)
//	for running() > 0 && time.Now().Before(plan.Deadline("drain")) { ... } // re-read: it moves
//
// In the SIGTERM handler:
//
//	budget.OnSIGTERM(time.Now())                 // the kubelet's arithmetic refines SIGKILL
//	ctx, cancel := plan.Context(ctx, "preserve") // then "teardown", "exit"
//
// (Example_wiring runs these lines.)
//
// # The kubelet's clock
//
// With a preStop hook the kubelet waits for it at most G, subtracts its
// elapsed time truncated to whole seconds from G, raises what is left to at
// least 2 s (MinimumGracePeriod), sends SIGTERM, waits that long and sends
// SIGKILL; KubeletRemaining is that rule. Without a hook SIGKILL comes G
// after SIGTERM, and 2 s after it when G is 1 s: the same floor (the rule
// with no elapsed time). G is the deletion's grace period, which can be
// shorter than the manifest's: the pod's metadata.deletionTimestamp
// (deletion time + G, read from the API server by package kube) is the
// absolute SIGKILL time. G can be longer too (kubectl drain
// --grace-period=600 on a pod whose manifest says 30): the kubelet waits
// the deletion's G in full, and OnRestart, given the deletion's time and G
// before any run over, moves SIGKILL later to its deletionTimestamp (only
// for the deletion that began the termination: the kubelet's grace only
// decreases once it runs). Only the deletion the kubelet's termination
// started with: a second, shorter deletion makes the API server set the
// deletionTimestamp to the first deletion's time + G', while the kubelet
// (v1.34, measured) keeps the grace its termination started with. A kubelet
// that does run the termination over (a restarted one: the hook runs again)
// times its grace from the new run: OnRestart takes that run's start and
// grace. A restart after a second deletion kills the new grace after the
// restart, with no new signal to a container without a hook: a drain that
// cannot see the restart plans for the earliest one (package drain,
// Config.Pod).
//
// # Guarantees
//
//   - T0 <= Budget.Deadline <= Budget.Kill; Deadline is SIGKILL minus the
//     margin (Config.Margin, by default a tenth of the grace in use within
//     [1.5 s, 5 s]: a deletion's shorter grace, once Tighten knows it, not
//     the manifest's), and the margin never takes more than half of the
//     time from the latest event (T0, a restart or SIGTERM) to SIGKILL.
//   - After OnSIGTERM, Kill is exactly what the kubelet computes from the
//     budget's T0 and grace; once Tighten gave it a time (a
//     deletionTimestamp), it stays at that time, or SIGTERM + 2 s if later,
//     in whichever order Tighten and OnSIGTERM came. Tighten only moves
//     SIGKILL earlier, never before T0, and never before SIGTERM + 2 s.
//     After OnRestart, Kill is what the kubelet computes from the new run's
//     start and grace, and may be later than before; T0 stays.
//   - The Plan is the only code that turns the budget into deadlines: every
//     phase asks it for its Window by name when it starts. A window's
//     deadline is in [its start, Budget.Deadline] while the budget's
//     deadline has not passed (the preStop wait's before SIGTERM in
//     [its start, Budget.Kill], below); phase deadlines never decrease along the
//     plan; a phase's deadline is the budget's Deadline minus the reserves
//     of all later phases whenever its own reserve and theirs all fit in
//     the time left, so time a phase leaves unused flows to the next.
//     Otherwise one rule shares the time left among the phase and the later
//     ones: critical phases get their reserves first, the others share the
//     rest in proportion to their reserves, and the last phase ends at the
//     budget's Deadline. So a later reserve that would fit on its own is
//     cut with the others when the phase's own does not (10 s left for 8 s
//     of preserve and 5 s of exit: exit gets 3.85 s), and a critical phase
//     keeps its reserve before a later phase's. Before SIGTERM the
//     first phase is the preStop wait, and the later ones start at
//     SIGTERM, which the kubelet follows with SIGKILL no sooner than 2 s
//     later: where ending the wait by that rule leaves them no more than
//     those 2 s would, and their reserves fit there (less the margin the
//     budget keeps of them), the wait's deadline is Budget.Kill, when the
//     kubelet gives up on the hook, and the later phases are laid out
//     from it (see Plan). A window's Hard deadline
//     is where the next critical phase's window begins. Split applies the
//     same rule to any window, for a step's own stages.
//   - Reserves are evaluated live, at every Window, Deadline, Context,
//     Windows and Shortfall call; contexts carry the deadline of the moment
//     they were made.
//   - Sums of reserves saturate at the largest Duration (about 292 years):
//     past that, shares are not exact.
//   - Every time the budget holds is on the monotonic clock, as the
//     kubelet's timers are: a time given with only a wall clock reading (an
//     exec hook's start, a deletionTimestamp, both parsed from text) is taken
//     as the instant it names when it is given, so a later step of the node's
//     clock (NTP, a VM resumed) moves no deadline.
//
// # Observability
//
// Config.Logger makes a Budget log every change that takes effect (preStop,
// SIGTERM, SIGTERM with the hook abandoned, restart, tighten) with T0,
// SIGKILL and the deadline, and after a restart the run and its grace that
// SIGKILL follows: the numbers to check when a pod was killed early. Each
// line shows the state its own change left, and the change's number
// ("change": 1 for the first): lines of changes made at once by two
// goroutines (SIGTERM, a read of the pod) may be written in either order,
// and the number says which took effect first.
//
// Budget, Plan and Estimator are safe for concurrent use.
// Nothing in the package keeps global state or starts goroutines.
package deadline
