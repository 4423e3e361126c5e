package drain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/pause"
)

// Shutdown takes the node through the rest of its termination and returns
// the Report. It is single-flight: the first call runs the shutdown, later
// and concurrent calls wait for it and get the same Report.
//
// Shutdown treats its first call as the arrival of SIGTERM: it calls
// Budget.OnSIGTERM, which refines the expected SIGKILL with the kubelet's
// arithmetic (or anchors T0 now when no preStop hook ran), or, when the
// latest preStop request is still open, Budget.OnHookAbandoned (the
// kubelet gave up on the hook: SIGKILL in 2 s; logged at Warn with the
// grace the kubelet used, T0 to SIGTERM, and the budget's), ends the preStop
// wait, and logs the plan (every phase's deadline and reserve), with a
// warning when the reserves do not fit in the time left. Then, in order,
// each phase under the window the plan gives it by name when it starts:
//
//  1. gate: closes the gate if the preStop did not, counts the running
//     sandboxes if no preStop counted them (so the preserve reserve is
//     known; a count that has not answered halfway to the preserve
//     phase's deadline is given up, and the preserve phase lists them
//     itself), and waits for admitted operations of gated classes to
//     finish, at most InFlightWait;
//  2. preserve: runs the Preserver under the preserve window: no preserve
//     starts after its Deadline, and preserves still in flight end by its
//     Hard deadline (the start of the first critical step's window, or the
//     budget's deadline). When the gate wait ended with gated operations
//     that start a sandbox (Create, Resume, Fork) still in flight, whose
//     sandbox may start after the Preserver's last listing, it then waits
//     for them until its Deadline
//     and runs the Preserver again for what they started, merged into
//     Report.Preserve; one still in flight at the Deadline fails the phase.
//     Streams (Stream) are never waited for; when the phase ends, every
//     stream the gate admitted must end: the Gate's StreamsEnded channel
//     closes, those its Middleware admitted have their requests' contexts
//     cancelled, and the gate refuses a Stream from then on;
//  3. every Step in order, each under its own window, even when
//     preservation partly failed or an earlier step failed. A step that has
//     not returned shortly after its deadline is abandoned, still running,
//     and reported Abandoned. A step that returns a *pause.Report (a final
//     sweep: see Step) has it merged into the preserve phase's account
//     before anything is reported.
//
// When the time left is smaller than the reserves of the phases still to
// run (the kubelet's 2 s after an overrunning hook), the plan's rule shares
// it: critical steps first, the rest in proportion to their reserves (see
// deadline.Plan). The Report says which phases were short.
//
// Force (or ctx ending while Shutdown runs, or a SIGINT after the first
// signal with HandleSignals; a SIGTERM again does not force: see
// ServeSignals) stops the remaining waits: the gate wait ends, the
// Preserver starts no new preserve (in-flight ones end as its in-flight
// policy says), and each step not yet finished gets only its reserve (its
// context's deadline for a step that begins forced; a running one with a
// Tighten method is told it: see Step). A ctx already done when Shutdown
// is called forces nothing, and is logged at Warn: it is the one that said
// to drain (signal.NotifyContext's, after its SIGTERM), not a deadline for
// the drain, and taken for force it lost every sandbox not yet preserved
// with the whole grace left. Every phase ends by the budget's
// deadline, so Shutdown returns by then unless steps are abandoned, each of
// which costs at most a moment more, or, with Config.Pod, events are still
// queued once the Report is made: it waits for them at most 1 s more, and
// never more than half the time left before SIGKILL (which the budget's
// margin holds).
//
// The Report is logged once through the Logger, and DrainFinished posted,
// after the last step: what they say is the Report returned, every step's
// sweep included; each phase is a span. The reads of the pod's deletion
// (Config.Pod) still in flight are ended, and waited for, before the
// Report is made: its Budget and Headroom are the budget the drain ended
// with, a deletion read last included.
// Shutdown never exits the process: the caller decides the exit code, for
// example from Report.Err. On a Drainer not made by New it returns at once
// a Report whose Err says so (see Drainer).
func (d *Drainer) Shutdown(ctx context.Context) *Report {
	if !d.made() {
		return notMadeReport()
	}
	// A ctx already done is the one that said to drain (signal.NotifyContext's
	// after its SIGTERM), not a deadline for the drain: taken for force, it
	// ended every wait at once and lost every sandbox not yet preserved,
	// with the whole grace left.
	ended := ctx.Err() != nil
	if !ended {
		stop := context.AfterFunc(ctx, d.Force)
		defer stop()
	}
	d.mu.Lock()
	first := !d.started
	d.started = true
	abandoned := (d.hookOpen || d.pollsOpen > 0) && !d.interrupted.Load()
	blind := d.prestop == nil // no hook call shows the kubelet's new run
	d.mu.Unlock()
	if first {
		if ended {
			d.log.Warn("drain: Shutdown's ctx had ended before the call: not taken for force; the drain runs to its deadlines "+
				"(a ctx that ends during the drain forces it; Force forces at once)", "cause", context.Cause(ctx))
		}
		if abandoned { // the kubelet gave up on the hook: its grace has run out
			now := time.Now()
			run := d.budget.State() // the hook's latest run: T0, or the kubelet's run over
			if run.Restart.After(run.Start) {
				run.Start = run.Restart
			}
			d.budget.OnHookAbandoned(now)
			d.log.Warn("drain: SIGTERM came while the preStop hook was still open: the kubelet's grace period ran out before the budget's, "+
				"and SIGKILL comes 2 s after SIGTERM: the grace the budget was built with (DRAINKIT_GRACE on the one-call path) is longer "+
				"than the pod's terminationGracePeriodSeconds, or a deletion, an eviction or a node shutdown gave less "+
				"(Config.Pod reads a deletion's; Config.KubeletGrace, DRAINKIT_KUBELET_GRACE, declares the kubelet's own)",
				"kubelet_grace", now.Sub(run.Start).Round(time.Second), "budget_grace", d.budget.Grace())
		} else {
			d.budget.OnSIGTERM(time.Now())
		}
		if d.own.Load() { // the arithmetic at SIGTERM does not outlast the node's own end
			d.tightenOwn()
		}
		d.readPod("SIGTERM")
		if blind {
			d.pollDeletion()
		}
		d.termStop()
		d.finish(d.run(context.WithoutCancel(ctx)))
	}
	<-d.done
	return d.report
}

func (d *Drainer) finish(rep *Report) {
	d.mu.Lock()
	d.report = rep
	d.mu.Unlock()
	close(d.done)
}

func (d *Drainer) run(ctx context.Context) *Report {
	d.mu.Lock()
	run := d.prestop
	span := d.root
	d.mu.Unlock()
	if span != nil { // the preStop call started the termination's span
		ctx = trace.ContextWithSpan(ctx, span)
	} else {
		ctx, span = d.tracer.Start(ctx, rootSpan)
	}
	defer span.End()
	rep := &Report{Start: time.Now()}
	warned := d.logPlan(ctx)
	if run == nil {
		d.eventStarted("SIGTERM without a preStop call: gate closing", PhaseGate)
	}

	if run != nil {
		d.awaitPreStopWait(run)
		sum := run.summary()
		rep.PreStop = &sum
		rep.Phases = append(rep.Phases, PhaseReport{Name: PhaseDrain, Start: sum.Start, End: sum.End,
			Deadline: sum.DrainDeadline, Duration: sum.Waited, Result: drainResult(sum.Reason), Error: sum.Reason})
	}

	d.tell(rep, PhaseGate)
	d.phase(ctx, rep, PhaseGate, d.gatePhase)
	rep.Shortfall = d.plan.ShortfallFrom(PhasePreserve) // the count is in now
	if rep.Shortfall > 0 && !warned {
		// Without a preStop call the plan at SIGTERM had no count: it
		// planned one round, and said it fit.
		d.log.Log(ctx, slog.LevelWarn, msgDoesNotFit,
			"running", d.Running(), "shortfall", rep.Shortfall, "kill", d.budget.Kill(),
			"preserve", d.plan.Window(PhasePreserve).Deadline)
	}
	d.phase(ctx, rep, PhasePreserve, func(ctx context.Context, w deadline.Window, p *PhaseReport) {
		d.preservePhase(ctx, rep, w, p)
	})
	d.gate.endStreams() // the sandboxes they stream from are preserved or lost: the server's step must not wait for them
	d.eventLost(rep)
	for i, s := range d.steps {
		d.phase(ctx, rep, d.phases[i].Name, func(ctx context.Context, w deadline.Window, p *PhaseReport) {
			d.stepPhase(ctx, s, w, p)
		})
		p := rep.Phases[len(rep.Phases)-1]
		d.mergeSweep(rep, p)
		d.eventStep(p)
	}

	// A read of the pod still in flight may yet tighten the budget: it is
	// stopped, and waited for, before the Report copies the budget, so
	// that Budget, Headroom and all that tells them (the log line,
	// DrainFinished, the span, a termination message) are the budget the
	// drain ended with.
	d.stopPodReads()
	d.refusedSoFar(rep)
	rep.End = time.Now()
	rep.Budget = d.budget.State()
	rep.Headroom = rep.Budget.Kill.Sub(rep.End)
	d.podFacts(rep)
	d.mu.Lock()
	rep.ForcedAt = d.forcedAt
	rep.Cause, rep.Signals = d.cause, slices.Clone(d.signals)
	d.mu.Unlock()
	rep.Forced = !rep.ForcedAt.IsZero()
	d.headroom.Record(ctx, rep.Headroom.Seconds())
	d.recordOutcomes(ctx, rep)
	span.SetAttributes(attribute.Float64(attrHeadroom, rep.Headroom.Seconds()), attribute.Int(attrLost, rep.Lost()),
		attribute.Bool(attrForced, rep.Forced))
	if err := rep.Err(); err != nil { // sandboxes lost, a step failed, or SIGKILL came first
		span.SetStatus(codes.Error, err.Error())
	}
	rep.Events = d.finishEvents(rep)
	level := slogLevel(rep)
	d.log.Log(ctx, level, "drain: shutdown finished", "report", rep)
	return rep
}

// recordOutcomes counts every sandbox of rep once, by its outcome in the
// drain's final account: the Preserver's own metric
// (drainkit.pause.sandboxes) counts per Run, and a phase that runs it again
// (a restarted kubelet, creates in flight at the gate) or a step's sweep
// counts a sandbox the first Run left not started again when a later one
// preserves it. Sandboxes the preserve phase left no account of are
// "unaccounted".
func (d *Drainer) recordOutcomes(ctx context.Context, rep *Report) {
	add := func(o string, n int) {
		if n > 0 {
			d.outcomes.Add(ctx, int64(n), metric.WithAttributes(attribute.String(attrOutcome, o)))
		}
	}
	if rep.Preserve == nil {
		add(outcomeUnaccounted, rep.Unaccounted)
		return
	}
	for o, n := range rep.Preserve.Counts {
		add(string(o), n)
	}
}

// outcomeUnaccounted is drainkit.drain.outcome for the sandboxes the drain
// counted and the preserve phase left no account of (Report.Unaccounted).
const outcomeUnaccounted = "unaccounted"

// msgNoCountYet is the plan line's count before any: the reserve counts
// one preserve (toPreserve) until the gate phase lists the sandboxes.
const msgNoCountYet = "none yet: the preserve phase's reserve is one round until the gate phase counts"

// msgDoesNotFit is the warning that the phases' reserves do not fit in the
// time left: at SIGTERM, or once the gate phase has counted.
const msgDoesNotFit = "drain: the work does not fit in the time left; phases share it"

// logPlan logs, at SIGTERM, the windows every phase still to run would get
// if each ran to its deadline, and warns when their reserves do not fit in
// the time left; it reports whether it warned.
func (d *Drainer) logPlan(ctx context.Context) (warned bool) {
	short := d.plan.ShortfallFrom(PhaseGate)
	ws := d.plan.Windows(PhaseGate)
	attrs := make([]any, 0, len(ws)+3)
	for _, w := range ws {
		attrs = append(attrs, slog.Group(w.Name, "deadline", w.Deadline, "reserve", w.Reserve, "short", w.Short))
	}
	st := d.budget.State()
	attrs = append(attrs, "kill", st.Kill, "deadline", st.Deadline)
	if d.counted.Load() {
		attrs = append(attrs, "running", d.Running())
	} else { // no preStop call, or its listing never returned: 0 would read as nothing to preserve
		attrs = append(attrs, "count", msgNoCountYet)
	}
	if d.pod != nil {
		// The plan stands on the budget alone. A static pod's mirror pod
		// not made at start is the read at SIGTERM's to find (sayPodIdentity
		// said it once): an error only if that read finds no pod either.
		if err := d.misnamed(); err != nil && !d.startID.MirrorPending() {
			attrs = append(attrs, "pod_mismatch", err)
		}
		if d.saysStatic() {
			attrs = append(attrs, "static_pod", msgStatic)
		}
	}
	d.mu.Lock()
	if d.cause != "" && d.cause != "SIGTERM" { // the plan is laid out as at SIGTERM: say what began it
		attrs = append(attrs, "cause", d.cause)
	}
	d.mu.Unlock()
	if short > 0 {
		d.log.Log(ctx, slog.LevelWarn, msgDoesNotFit,
			append(attrs, "shortfall", short)...)
		return true
	}
	d.log.Log(ctx, slog.LevelInfo, "drain: SIGTERM: plan", attrs...)
	return false
}

// awaitPreStopWait waits for the preStop wait that Shutdown just stopped
// (termStop) to end: at once, or once its count, given up on returnSlack
// after it saw the stop, is over. It waits twice returnSlack, the count's
// slack and as much for what follows the count, of the time it saw pass
// on time (internal/bounded's rule, by which the count gives up on its
// listing): a process frozen across both (a container at its CPU quota, a
// loaded node) runs again with this wait and the count's due at once, and
// a wait that gave up then took the preStop wait, stopped by SIGTERM, for
// one still waiting: the drain phase TimedOut, "waiting", with no End
// (docs/faults.md rows 2860, 3241). A wait that hangs past its count (a
// log handler that blocks) still holds Shutdown no longer than 2
// returnSlack while the process runs, and than the slack's wall bound
// and its last stretch (1.8 s and the rest of the 200 ms: 2 s) however
// held.
func (d *Drainer) awaitPreStopWait(run *preStopRun) {
	bounded.Within(run.done, 2*returnSlack)
}

// drainResult is the Result of the preStop wait that ended for reason.
func drainResult(reason string) Result {
	switch reason {
	case reasonDrained:
		return OK
	case reasonSIGTERM, reasonForced:
		return Stopped
	}
	return TimedOut
}

// phase runs one phase under its own span and the window the plan gives it
// now, and appends its PhaseReport.
func (d *Drainer) phase(ctx context.Context, rep *Report, name string,
	fn func(context.Context, deadline.Window, *PhaseReport)) {
	ctx, span := d.tracer.Start(ctx, phaseSpan(name), trace.WithAttributes(attribute.String(attrPhase, name)))
	defer span.End()
	w := d.plan.Window(name)
	p := PhaseReport{Name: name, Start: w.Start, Deadline: w.Deadline, Hard: reportedHard(w), Reserve: w.Reserve, Short: w.Short}
	fn(ctx, w, &p)
	p.End = time.Now()
	p.Duration = p.End.Sub(p.Start)
	p.Forced = d.force.Err() != nil
	d.observePhase(ctx, span, p)
	rep.Phases = append(rep.Phases, p)
	d.tell(rep, d.after(name))
}

// tell gives Config.progress (internal/drainprogress) rep as it stands,
// with the budget now and next, the phase that runs next.
func (d *Drainer) tell(rep *Report, next string) {
	if d.progress == nil {
		return
	}
	now := *rep
	now.Phases = slices.Clone(rep.Phases)
	now.Budget = d.budget.State()
	d.mu.Lock()
	now.Cause, now.Signals = d.cause, slices.Clone(d.signals)
	d.mu.Unlock()
	d.podFacts(&now)     // a static pod's account says so before a SIGKILL (docs/faults.md row 1610)
	d.refusedSoFar(&now) // and what the gate refused so far (row 2242)
	d.progress(&now, next)
}

// refusedSoFar sets the gate phase's Detail in rep, once it has that phase,
// to the account of every refusal so far, whichever phase it came in: the
// gate's is where it began. The Report as it stands (tell) has it too: a
// SIGKILL mid-drain leaves that one alone.
func (d *Drainer) refusedSoFar(rep *Report) {
	if p := rep.Phase(PhaseGate); p != nil {
		p.Detail = newGateDetail(d.gate.refusals(), rep.Phases)
	}
}

// podFacts sets in rep what the reads of the pod found so far: a name that
// is not the pod's, a UID never known, a static pod.
func (d *Drainer) podFacts(rep *Report) {
	if d.pod == nil {
		return
	}
	if err := d.misnamed(); err != nil {
		rep.PodMismatch = err.Error()
	}
	rep.PodUIDUnknown = d.pod.UID() == ""
	rep.StaticPod = staticPod(d.pod.Identity())
}

// after returns the phase the plan runs after name, "" after the last.
func (d *Drainer) after(name string) string {
	names := d.plan.Phases()
	if i := slices.Index(names, name); i >= 0 && i+1 < len(names) {
		return names[i+1]
	}
	return ""
}

// The termination's span, and each phase's span "drain.<phase>" under it.
const rootSpan = "drain.shutdown"

func phaseSpan(name string) string { return "drain." + name }

// observePhase records p's duration and ends its span's account: the
// result, force mode, and status Error when p counts against Report.Err.
func (d *Drainer) observePhase(ctx context.Context, span trace.Span, p PhaseReport) {
	d.phaseDur.Record(ctx, p.Duration.Seconds(), metric.WithAttributes(
		attribute.String(attrPhase, p.Name), attribute.String(attrResult, string(p.Result))))
	span.SetAttributes(attribute.String(attrResult, string(p.Result)), attribute.Bool(attrForced, p.Forced))
	if phaseFailed(p) {
		span.SetStatus(codes.Error, p.Error)
	}
}

// phaseFailed reports whether p counts against Report.Err: a drain or gate
// phase that timed out did not fail, its deadline ending it is the plan.
func phaseFailed(p PhaseReport) bool {
	switch p.Result {
	case OK, Stopped:
		return false
	case TimedOut:
		return p.Name != PhaseDrain && p.Name != PhaseGate
	}
	return true
}

// forceCancel returns ctx cancelled with ErrForced when Force is called.
func (d *Drainer) forceCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(d.force, func() { cancel(ErrForced) })
	if d.force.Err() != nil {
		// AfterFunc calls its func in a goroutine of its own, even for a
		// force already made: the phase's work, called at once, would
		// start before it ran (row 624).
		cancel(ErrForced)
	}
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// gatePhase closes the gate, counts the running sandboxes when no preStop
// did, and waits for admitted gated operations until the gate's deadline,
// which the count may bring earlier. The count is bounded by half the time
// to the preserve phase's deadline as it stands (planned for one round of
// preserves), not by the gate's: when time is short the gate gets none,
// but the count decides the preserve phase's share; a Lister that hangs
// cannot spend the steps' reserves, and leaves the preserve phase, whose
// listing is a call of its own (a new connection, where the count's hung
// on one half open), the other half. Bounded by the preserve deadline
// itself, one hung call took the preserve phase's whole time: no preserve
// started.
func (d *Drainer) gatePhase(ctx context.Context, w deadline.Window, p *PhaseReport) {
	d.gate.Close()
	var uncounted string
	if !d.counted.Load() {
		start := time.Now()
		if d.count(ctx, start.Add(d.plan.Deadline(PhasePreserve).Sub(start)/2)) < 0 {
			// Said in the Report, not only in the log: a Lister that hangs
			// holds this count up to its bound, and the gate phase said
			// "ok" of the time it took.
			uncounted = fmt.Sprintf("counting the running sandboxes failed after %v (logged); the preserve phase lists them itself",
				time.Since(start).Round(time.Millisecond))
		}
		if dl := d.plan.Deadline(PhaseGate); dl.Before(p.Deadline) {
			p.Deadline = dl // the count moved the preserve reserve
		}
	}
	ctx, stop := d.phaseContext(ctx, PhaseGate, p, nil)
	defer stop()
	if err := d.gate.Wait(ctx); err != nil {
		p.Result, p.Error = TimedOut, joinNote(fmt.Sprintf("gated operations still in flight: %v", context.Cause(ctx)), uncounted)
		// The gate is closed: no new gated operation starts, so the ones
		// counted now are all the preserve phase must wait for.
		d.starting = d.gate.gatedInFlight(startClasses)
		return
	}
	p.Result, p.Error = OK, uncounted
}

// joinNote is msg, then note after a semicolon when there is one.
func joinNote(msg, note string) string {
	if note == "" {
		return msg
	}
	return msg + "; " + note
}

// startClasses are the classes of operations that start a sandbox: one
// still in flight when the gate wait ends may start it after the
// Preserver's last listing (see preserveAfterInFlight).
var startClasses = []Class{Create, Resume, Fork}

// preservePhase runs the Preserver in the phase's window, and again for
// as long as the budget moves the window later while sandboxes are left:
// a restarted kubelet runs the termination over and gives the pod's whole
// grace again from its new hook call (Budget.OnRestart), or SIGTERM's read
// of a pod with no hook finds a deletion's grace longer than the budget's
// (longerRead), and the window
// the phase began with would stop preserving with that time unspent. Each
// run's Report is merged into the first's.
func (d *Drainer) preservePhase(ctx context.Context, rep *Report, w deadline.Window, p *PhaseReport) {
	kill := d.budget.Kill()
	planned := d.estimator().Estimate() // what the plan counted before this phase measured any
	told := new(tightenFault)
	pr, inflight, err := d.preserveIn(ctx, w, p, told)
	for err == nil && pr != nil && !pr.Unknown && pr.Err() != nil && d.force.Err() == nil {
		// Only a budget that moved SIGKILL later gives more time; the
		// plan's window alone moves with what the phase did (its reserve
		// follows the sandboxes left).
		later, moved := d.plan.Window(PhasePreserve), d.budget.Kill()
		if !moved.After(kill) || !later.Deadline.After(p.Deadline) || !time.Now().Before(later.Deadline) {
			break
		}
		kill = moved
		d.log.Info("drain: the budget moved SIGKILL later during the preserve phase (the kubelet ran the termination over, or a read found the deletion's longer grace): preserving what is left until the new deadline",
			"was", p.Deadline, "deadline", later.Deadline, "hard", later.Hard, "kill", d.budget.Kill(), "not_preserved", pr.Err().Error())
		p.Deadline, p.Hard = later.Deadline, reportedHard(later)
		var more *pause.Report
		more, inflight, err = d.preserveIn(ctx, later, p, told)
		if more != nil {
			mergeSweep(pr, more)
		}
	}
	if pr != nil && (pr.Unknown || pr.Incomplete) {
		accountFromCount(pr, d.listed.Load())
	}
	rep.Preserve = pr
	if l := d.listed.Load(); pr == nil && l != nil {
		rep.Unaccounted = len(l.ids) // the count is all the Report can say of them
	}
	switch {
	case errors.Is(err, bounded.ErrAbandoned):
		p.Result, p.Error = Abandoned, "the Preserver did not return by the hard deadline"
	case err != nil:
		p.Result, p.Error = Failed, err.Error()
	case pr == nil:
		p.Result, p.Error = Failed, "the Preserver returned no report"
	case pr.Err() != nil: // sandboxes lost, or unknown: no listing succeeded
		p.Result, p.Error = Failed, pr.Err().Error()+d.underestimated(ctx, pr, planned)
	case len(inflight) > 0:
		p.Result, p.Error = Failed, fmt.Sprintf("gated operations admitted before the gate closed still in flight when the preserve phase ended (its deadline, or force): %s: "+
			"a sandbox they start is not preserved (a call that streams for as long as its client keeps it open is a drain.Stream, not a %s)",
			classCounts(inflight), firstClass(inflight))
	default:
		p.Result = OK
	}
	told.fail(p)
}

// underestimated says, when this phase's preserves took much longer than
// the estimates the plan counted for them, by how much (a suffix for the
// phase's error, also logged): the time before SIGTERM, the preStop wait
// above all, was planned for shorter preserves, which is why they were
// lost, and the estimate is the setting to change. It compares each
// preserve that ended preserved or timed out (a timed out one's time is a
// lower bound) with its own estimate (pause.Estimated, or its size at the
// rate measured), else planned, the Estimator's before the phase, and
// takes the median ratio. A preserve the Preserver abandoned (it ignored
// its context: a hang) is no measurement: hung preserves say so instead,
// and that the estimate is not what to change.
func (d *Drainer) underestimated(ctx context.Context, pr *pause.Report, planned time.Duration) string {
	var ratios []float64
	var took []time.Duration // of the preserves counted with planned, the Estimator's: what to set it to
	hung := 0
	for _, e := range pr.Entries {
		if e.Abandoned() {
			hung++
			continue
		}
		est := cmp.Or(e.Estimate, planned)
		if est > 0 && e.Duration > 0 && (e.Outcome == pause.Preserved || e.Outcome == pause.TimedOut) {
			ratios = append(ratios, float64(e.Duration)/float64(est))
			if e.Estimate == 0 {
				took = append(took, e.Duration)
			}
		}
	}
	var note string
	if hung > 0 {
		note = fmt.Sprintf("; %d preserve(s) never returned (they ignored their context: a hang, not a slow preserve) and held their slots until "+
			"the Preserver gave up on them: Config.Pause.SandboxTimeout (%s on the one-call path) bounds each", hung, EnvSandboxTimeout)
		d.log.Log(ctx, slog.LevelWarn, "drain: preserves hung: they ignored their context and held their slots until the Preserver gave up on them",
			"hung", hung, "setting", "Config.Pause.SandboxTimeout, "+EnvSandboxTimeout)
	}
	if len(ratios) == 0 {
		return note
	}
	slices.Sort(ratios)
	x := ratios[len(ratios)/2]
	if x < 1.5 {
		return note
	}
	attrs := []any{"times", fmt.Sprintf("%.1f", x), "measured", len(ratios), "estimator", planned}
	var setTo string
	if v, ok := estimateToSet(took, planned); ok {
		attrs = append(attrs, "set_to", v)
		setTo = fmt.Sprintf("; set the estimate to at least %v, the median time the %d counted with it took", v, len(took))
	}
	d.log.Log(ctx, slog.LevelWarn, "drain: preserves took much longer than the estimate the plan counted: set the estimate to what one takes on this node",
		append(attrs, "setting", "Config.Pause.Estimator, "+EnvPreserveEstimate)...)
	return fmt.Sprintf("; preserves took %.1f times the estimate the plan counted (the median of %d; the Estimator's was %v: "+
		"Config.Pause.Estimator, %s on the one-call path, or the sandboxes' own): the time before SIGTERM was planned for shorter preserves",
		x, len(ratios), planned, EnvPreserveEstimate) + setTo + note
}

// estimateToSet is the Estimator's estimate to set after preserves counted
// with planned took took (a timed out one's time a lower bound): their
// median, rounded up to a tenth of a second, when it is much longer than
// planned (the ratio underestimated warns at). A ratio alone left the
// operator to multiply a rounded figure by the estimate. None when no
// preserve was counted with the Estimator's (every sandbox estimated its
// own: pause.Estimated, Sized).
func estimateToSet(took []time.Duration, planned time.Duration) (time.Duration, bool) {
	if len(took) == 0 {
		return 0, false
	}
	slices.Sort(took)
	median := took[len(took)/2]
	v := median.Truncate(100 * time.Millisecond)
	if v < median { // up: a lower value is one the preserves outlast
		v += 100 * time.Millisecond
	}
	return v, float64(v) >= 1.5*float64(planned)
}

// preserveIn runs the Preserver in window w, and again for what the
// operations in flight as the gate closed started (preserveAfterInFlight);
// the window follows a budget that moves SIGKILL earlier (followBudget),
// and told keeps a panic of the Preserver's Tighten.
func (d *Drainer) preserveIn(ctx context.Context, w deadline.Window, p *PhaseReport, told *tightenFault) (*pause.Report, map[Class]int, error) {
	ends := &preserveEnds{told: told}
	ends.set(w.Deadline, w.Hard)
	ctx, stop := d.phaseContext(ctx, PhasePreserve, p, ends) // p.Deadline is w's
	defer stop()
	run := func() (*pause.Report, error) {
		// bounded.Call waits for the Preserver until the hard deadline, not
		// the phase deadline: in-flight preserves may finish until then.
		hctx, hcancel := hardContext(ctx, ends)
		defer hcancel()
		return bounded.Call(hctx, returnSlack, func(context.Context) (*pause.Report, error) {
			e := ends.get()
			if t, ok := d.preserver.(tightener); ok {
				// A move between the read above and the Run registering
				// as the one in progress found no Run to tell: told again
				// when the phase's context ends (at the moved deadline, at
				// the latest), the Run cuts its preserves by the new hard
				// deadline.
				defer context.AfterFunc(ctx, func() {
					if now := ends.get().hard; now.Before(e.hard) {
						told.tell(t, now, "the Preserver", d.log)
					}
				})()
			}
			ctx, cancel := context.WithDeadline(ctx, e.deadline)
			defer cancel()
			return d.preserver.Run(ctx, e.hard), nil
		})
	}
	pr, err := run()
	var inflight map[Class]int
	if err == nil && pr != nil && !pr.Unknown && len(d.starting) > 0 {
		inflight, err = d.preserveAfterInFlight(ctx, pr, run)
	}
	return pr, inflight, err
}

// hardContext returns a context, not cancelled with ctx (the preserve
// phase's), that ends at the phase's hard deadline as ends has it: the
// window's, or, once ctx has ended, the earlier one a budget that moved
// SIGKILL earlier gave it (followBudget moves ends before ctx ends). A
// Preserver with no Tighten cannot be told the move, and its in-flight
// preserves may keep the hard deadline it was called with, as Run's
// contract lets them: waited for until then, the drain held the critical
// steps after it (ublk's teardown) past the new SIGKILL (docs/faults.md
// row 3402).
func hardContext(ctx context.Context, ends *preserveEnds) (context.Context, context.CancelFunc) {
	hctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), ends.get().hard)
	hctx, cut := context.WithCancelCause(hctx)
	var mu sync.Mutex
	var moved *time.Timer
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		moved = time.AfterFunc(time.Until(ends.get().hard), func() { cut(errBudgetMoved) })
	})
	return hctx, func() {
		stop()
		mu.Lock()
		if moved != nil {
			moved.Stop()
		}
		mu.Unlock()
		cut(context.Canceled)
		cancel()
	}
}

// reportedHard is a PhaseReport's Hard for window w: zero where it is the
// window's deadline.
func reportedHard(w deadline.Window) time.Time {
	if w.Hard.Equal(w.Deadline) {
		return time.Time{}
	}
	return w.Hard
}

// phaseContext returns ctx ending at phase name's deadline p.Deadline, at
// the earlier one a budget that moves SIGKILL earlier gives it
// (followBudget; ends is the preserve phase's, nil for another phase), and
// at Force; stop releases it.
func (d *Drainer) phaseContext(ctx context.Context, name string, p *PhaseReport, ends *preserveEnds) (_ context.Context, stop func()) {
	ctx, cancel := context.WithDeadline(ctx, p.Deadline)
	ctx, unfollow := d.followBudget(ctx, name, p, ends, nil)
	ctx, unforce := d.forceCancel(ctx)
	return ctx, func() { unforce(); unfollow(); cancel() }
}

// A tightener is a Preserver whose Run's hard deadline can move earlier,
// as *pause.Preserver's (Tighten), or a Step whose Run's deadline can, as
// *ublk.Teardown's.
type tightener interface{ Tighten(deadline time.Time) bool }

// preserveEnds are the deadlines the preserve phase's Runs are given, its
// context's and the hard one: the window's, or the earlier ones a budget
// that moved SIGKILL earlier gave it (followBudget). Each Run of the phase
// reads them as it is called: the Run in progress is told a move (its
// context is cancelled, and Tighten), and one called after it, for the
// sandboxes the creates in flight at the gate started
// (preserveAfterInFlight), had the window's as laid out at the phase's
// start, its preserves running past the new SIGKILL (row 622).
// followBudget sets them before it calls Tighten, and preserveIn reads
// them in the goroutine that calls Run, just before the call.
type preserveEnds struct {
	at   atomic.Pointer[phaseEnds]
	told *tightenFault // where a panic of the Preserver's Tighten is kept
}

type phaseEnds struct{ deadline, hard time.Time }

func (e *preserveEnds) get() phaseEnds               { return *e.at.Load() }
func (e *preserveEnds) set(deadline, hard time.Time) { e.at.Store(&phaseEnds{deadline, hard}) }

// errBudgetMoved ends a phase at the deadline a budget that moved earlier
// gives it.
var errBudgetMoved = errors.New("drain: the budget moved SIGKILL earlier: the phase ends at its new deadline")

// followBudget returns ctx cancelled with errBudgetMoved at phase name's
// deadline as the plan gives it whenever the budget changes, if that is
// earlier than p.Deadline, which it moves there. The phase's window
// is laid out when it starts, and a read of the pod's deletion started at
// SIGTERM lands a few milliseconds later, after the window of a pod that
// has no preStop hook (measured under the real kubelet: the Preserver
// started with 16.5 s, the read 6 ms later said 7.5 s, and SIGKILL took
// the Preserver's pauses and the device teardown after it). The gate's
// wait for operations in flight ends there; no preserve starts after it,
// and a Preserver that can (pause.Preserver.Tighten) ends the running ones
// by the new hard deadline, the next critical phase's start, when the hard
// deadline they had (ends, the preserve phase's; nil for another phase)
// is past the budget's deadline; a Run called after is given both (see
// preserveEnds). A step ends
// there too, so that a critical step after it keeps its reserve; step,
// the running Step's deadline (nil for the gate and preserve phases), is
// told its new deadline first (see stepDeadline): cancelled alone, a step
// that planned its stages in its deadline at the start (the device
// teardown's control fallback and kill) ran none of the late ones.
func (d *Drainer) followBudget(ctx context.Context, name string, p *PhaseReport, ends *preserveEnds, step *stepDeadline) (context.Context, context.CancelFunc) {
	kill := d.budget.Kill() // what the warning compares with: next runs in follow's one goroutine
	return follow.Earlier(ctx, d.budget.Changed, func() (time.Time, bool) {
		w := d.plan.Window(name)
		if !w.Deadline.Before(p.Deadline) {
			return time.Time{}, false
		}
		dl := w.Deadline
		p.Deadline = dl
		// The phase had that much less than its reserve: the
		// budget squeezed it (PhaseReport.Short).
		p.Short = max(p.Short, p.Reserve-dl.Sub(p.Start))
		kill = d.warnMoved(name, w, kill)
		// The preserves still running end by the next critical
		// phase's start, if the hard deadline they run to would
		// take them past the budget's deadline: a shift of the
		// budget by the deletionTimestamp's truncation to whole
		// seconds, the common case, leaves them alone (they end in
		// the margin), where cutting one would lose its sandbox.
		if ends != nil {
			// First: a Run called from now is given them.
			if hard := ends.get().hard; hard.After(d.budget.Deadline()) {
				ends.set(dl, w.Hard)
				if t, ok := d.preserver.(tightener); ok {
					ends.told.tell(t, w.Hard, "the Preserver", d.log)
				}
			} else {
				ends.set(dl, hard)
			}
		}
		if step != nil {
			step.tell(dl)
		}
		return dl, true
	}, errBudgetMoved)
}

// warnMoved says at Warn that phase name now ends at w's deadline, and
// what moved it: SIGKILL, earlier than kill (its previous value, which it
// returns updated), or the node's end alone (internal/nodeend: the
// kubelet's own grace under 2 s, read late, which moves the deadline where
// SIGKILL stays at the kubelet's 2 s after SIGTERM). Saying SIGKILL moved
// then sent an operator after a deletion that never came.
func (d *Drainer) warnMoved(name string, w deadline.Window, kill time.Time) time.Time {
	now := d.budget.Kill()
	msg := "drain: the budget moved SIGKILL earlier during a phase: it ends at its new deadline"
	if !now.Before(kill) {
		msg = "drain: the node's end moved the budget's deadline earlier during a phase, SIGKILL unchanged: it ends at its new deadline"
	}
	d.log.Warn(msg, "phase", name, "deadline", w.Deadline, "hard", w.Hard, "kill", now)
	return now
}

// preserveAfterInFlight is the end of a preserve phase that began with
// operations that start a sandbox still in flight (d.starting: the gate
// wait timed out on them): a create admitted before the gate closed may
// start its sandbox after the Preserver's last listing, where nothing would
// preserve it or count it. It waits for them within the phase's deadline,
// then runs the Preserver again (run) for what they started and merges that
// Report into pr, as a step's final sweep is merged. Ones that ended only
// past the deadline (the Preserver waited for a sandbox it listed while
// they created it) get no second run, which could not list: a listing says
// whether every running sandbox has its entry in pr. It returns the ones
// still in flight, by class, when it gave up waiting (the deadline, or
// force), or ended past it with a running sandbox pr does not account for,
// and the error of an abandoned second run.
func (d *Drainer) preserveAfterInFlight(ctx context.Context, pr *pause.Report, run func() (*pause.Report, error)) (map[Class]int, error) {
	if err := d.gate.waitClasses(ctx, startClasses); err != nil {
		if left := d.gate.gatedInFlight(startClasses); len(left) > 0 {
			return left, nil
		}
		// They ended between the wait's end and the count: past the
		// phase's deadline (or force) all the same, where nothing
		// preserves what they started. Counted as the wait found them,
		// not as none (the phase said OK of a sandbox nothing listed).
		return d.starting, nil
	}
	if ctx.Err() != nil {
		// They ended past the phase's deadline (or force): a Preserver run now
		// could neither start a preserve nor list. The first run may have listed
		// and preserved what they started (a server that lists a sandbox still
		// being created): a listing says whether anything runs that the Report
		// does not account for; if so, or if it cannot say, they count as in
		// flight at the deadline.
		if d.accounted(ctx, pr) {
			return nil, nil
		}
		return d.starting, nil
	}
	more, err := run()
	switch {
	case err != nil:
		return nil, err
	case more == nil:
		return nil, errors.New("the Preserver returned no report after the gated operations in flight ended")
	case more.Unknown:
		return nil, fmt.Errorf("listing after the gated operations in flight ended failed: %s", more.ListErr)
	}
	mergeSweep(pr, more)
	return nil, nil
}

// accounted reports whether every sandbox the Lister lists now has an entry in pr, the
// listing bounded by returnSlack from now; false without a Lister, when the listing
// fails, or when it lists an element with no ID (nil, empty, or an ID that panics).
func (d *Drainer) accounted(ctx context.Context, pr *pause.Report) bool {
	if d.lister == nil {
		return false
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), returnSlack)
	defer cancel()
	sbs, err := bounded.Call(lctx, 0, d.list)
	if err != nil {
		return false
	}
	known := make(map[string]bool, len(pr.Entries))
	for _, e := range pr.Entries {
		known[e.ID] = true
	}
	for _, sb := range sbs {
		// safeID: an element whose ID panics (or is empty, or nil) is a
		// sandbox pr cannot be said to account for, not a crash of the
		// drain before its steps.
		if id := safeID(sb); id == "" || !known[id] {
			return false
		}
	}
	return true
}

// firstClass is the first class of startClasses with a count in m.
func firstClass(m map[Class]int) Class {
	for _, c := range startClasses {
		if m[c] > 0 {
			return c
		}
	}
	return Create
}

// classCounts writes counts by class in the order of startClasses:
// "create: 1, resume: 2".
func classCounts(m map[Class]int) string {
	var parts []string
	for _, c := range startClasses {
		if n := m[c]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// stepPhase runs step s in its window w, following the budget, and fills
// its PhaseReport p. The step's name is p's: s.Phase is New's to call, once
// (see Step).
func (d *Drainer) stepPhase(ctx context.Context, s Step, w deadline.Window, p *PhaseReport) {
	outlived := false
	if now, kill := time.Now(), d.budget.Kill(); !now.Before(kill) && w.Reserve > 0 {
		// Alive past the SIGKILL the budget expected: the budget was
		// wrong (the kubelet's grace was longer than it knew), and an
		// empty window would leave the step's work, a device daemon with
		// live devices, to the process's exit. The step gets its reserve,
		// as under Force.
		w.Deadline, p.Deadline = now.Add(w.Reserve), now.Add(w.Reserve)
		outlived = true
		d.log.Warn("drain: the process outlived the SIGKILL the budget expected: the step gets its reserve",
			"step", p.Name, "past_kill", now.Sub(kill), "reserve", w.Reserve)
	}
	ctx, cancel := context.WithDeadline(ctx, w.Deadline)
	defer cancel()
	sd := &stepDeadline{step: s, name: "step " + p.Name, log: d.log}
	if !outlived {
		// A step follows the budget as the gate and preserve phases do: a
		// deletion read that lands while it runs (with no sandboxes the
		// first step starts right after SIGTERM) ends it at its new
		// deadline, and the critical step after it keeps its reserve.
		// Past the expected SIGKILL the budget is known wrong, and the
		// reserve stands.
		var unfollow context.CancelFunc
		ctx, unfollow = d.followBudget(ctx, p.Name, p, nil, sd)
		defer unfollow()
	}
	ctx, unforce := d.forceReserve(ctx, w.Reserve, sd)
	defer unforce()
	detail, err := bounded.Call(sd.context(withGate(ctx, d.gate)), returnSlack, s.Run)
	// Encoded next by a Progress (internal/lastreport), on this goroutine.
	p.Detail = d.encodableDetail(detail, p.Name)
	err = readableErr(err, "step "+p.Name, "the step failed") // read below outside any recover
	switch {
	case err == nil:
		p.Result = OK
	case errors.Is(err, bounded.ErrAbandoned):
		p.Result, p.Error = Abandoned, err.Error()
	case ctx.Err() != nil:
		p.Result, p.Error = TimedOut, err.Error()
		if cause := context.Cause(ctx); cause != nil && !strings.Contains(p.Error, cause.Error()) {
			p.Error += " (" + cause.Error() + ")" // a force, or the budget moved
		}
	default:
		p.Result, p.Error = Failed, err.Error()
	}
	// Told while Run ran: a follower tells before it cancels the context
	// Run returns at.
	sd.told.fail(p)
}

// forceReserve returns ctx ending with ErrForced reserve after Force is
// called: in force mode a step gets only its reserve. Forced before the
// step (s) began, that is ctx's deadline, which Run reads; forced while
// it runs, s is told it first (see stepDeadline, as for a budget that
// moves: see followBudget). A step that lays its work out inside its
// deadline (the ublk teardown's control fallback and kill, kept for its
// end) laid it out in the window it was given, and, cancelled when its
// reserve ran out, ran none of its late stages.
func (d *Drainer) forceReserve(ctx context.Context, reserve time.Duration, s *stepDeadline) (context.Context, context.CancelFunc) {
	return follow.Reserve(ctx, d.force.Done(), func() time.Duration { return reserve }, func(dl time.Time) bool {
		s.tell(dl)
		return true // ends there: a deadline a budget moved earlier ended it first, with its cause
	}, ErrForced)
}

// A stepDeadline is how a running step learns that its deadline moved
// earlier (followBudget, forceReserve): the context its Run gets
// (context) reports the latest as its Deadline, and a step with a Tighten
// method is told it. Tighten alone missed a move in the moment between
// Run's call and the step's registering as running, when Tighten does
// nothing (see Step): the step then planned in the deadline it was
// given, and was cancelled at the new one with its late stages unrun.
// tell moves the deadline before it calls Tighten, and a Run registers
// before it reads ctx's deadline: one of the two sees the move.
type stepDeadline struct {
	step  Step
	name  string // "step <name>", for a panic of its Tighten
	log   *slog.Logger
	told  tightenFault    // a panic of the step's Tighten
	moved follow.Deadline // none: not moved
}

// tell moves the step's deadline to dl if that is earlier, then tells
// the step (Tighten) when it can.
func (s *stepDeadline) tell(dl time.Time) {
	s.moved.Move(dl)
	if t, ok := s.step.(tightener); ok {
		s.told.tell(t, dl, s.name, s.log)
	}
}

// context returns ctx whose Deadline is the step's latest: ctx's own, or
// the earlier one tell moved it to (ctx is cancelled there by whoever
// moved it).
func (s *stepDeadline) context(ctx context.Context) context.Context {
	return s.moved.Context(ctx)
}

// accountFromCount fills a Report whose Run never listed (the preserve
// window was empty, or every listing failed) with the sandboxes the drain's
// last count saw, each not started: they are what SIGKILL takes, and the
// Report says so by name instead of "unknown". A Report whose listings
// all failed after listing some (Incomplete: a paginated listing whose
// later page failed) gets those of the count it has no entry for, each
// once: the Run accounted for the others. pr stays Incomplete: sandboxes
// started since the count may be missing still. It leaves pr alone when no
// count succeeded either.
func accountFromCount(pr *pause.Report, l *listing) {
	if l == nil {
		return
	}
	if pr.Counts == nil {
		pr.Counts = make(map[pause.Outcome]int)
	}
	why := fmt.Sprintf("no preserve pass listed it before the preserve deadline; the drain's count at %s listed it running",
		l.at.UTC().Format(time.RFC3339Nano))
	if pr.ListErr != "" {
		why += "; the preserve listing failed: " + pr.ListErr
	}
	known := make(map[string]bool, len(pr.Entries))
	for _, e := range pr.Entries {
		known[e.ID] = true
	}
	for _, id := range l.ids {
		if known[id] {
			continue
		}
		known[id] = true // one entry for an ID a flawed count listed twice
		pr.Entries = append(pr.Entries, pause.Entry{ID: id, Outcome: pause.NotStarted, Error: why})
		pr.Counts[pause.NotStarted]++
	}
	pr.Unknown = false
}
