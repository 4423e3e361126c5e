// Package bounded calls a function that may ignore its context, and stops
// waiting for it a fixed slack after the context ends: drainkit's one
// "abandon a call" mechanism, for the Lister, the Preserver and the
// drain's steps. A panic in the function is recovered and returned as an
// error with its stack, so a user's bug ends in the Report, not in a
// crashed process.
//
// An abandoned call's goroutine keeps running until the function returns;
// nothing can stop a function that ignores its context, and the process is
// about to exit anyway. The result is dropped.
//
//	report, err := bounded.Call(ctx, 100*time.Millisecond, preserver.Run)
//	if errors.Is(err, bounded.ErrAbandoned) { ... }
//
// # The slack is time the process ran
//
// A process that does not run for a while (a container at its CPU quota,
// whose threads CFS bandwidth control stops until the next period; a node
// at load 25; a SIGSTOP) runs again with every timer due at once: a wait
// that gives up then, and the call that was returning, are both due, and
// the wait can win, naming a hang a call that heeded its context. So the
// slack (Slack, which Call, Within and pause's wait for its preserves
// use) is counted in the time the waiting goroutine saw pass, awake:
//
//   - it starts when the waiter, awake, has seen the context end, not at
//     the deadline;
//   - it runs in stretches of at most 5 ms; each counts its length, less
//     how late the waiter saw it end past the 1 ms a running process's
//     timers can be late: a stretch seen 6 ms late or more counts
//     nothing, since the process (or the waiter) was stopped for an
//     unknown part of it, and what the waiter waits for with it; the next
//     stretch starts when the waiter has seen that;
//   - the waiter gives up once the stretches it counted make the whole
//     slack, or at the end of its last stretch: the rest of the slack in
//     one, which it starts at the first wake past the slack's wall bound
//     (a second and four times the slack: 1.4 s for drain's 100 ms, so
//     at most 1.5 s in all), counted or not; a value that is ready then
//     still wins. The rest, so that a wait inside another, with a shorter
//     slack, woken with it by one stop, gives up first (row 3320).
//
// So a stop of the process costs the waited-for call at most one stretch
// of its slack (5 ms, and the 1 ms), and nothing when it lasts 11 ms or
// more, however many stops there are, as long as the slack is counted
// within its wall bound; a stop that outlasts the bound still leaves the
// call the rest of its slack once the process runs again. With the process
// running, a call that hangs is abandoned the slack after the waiter saw
// its context end, and the latency of the waiter's wakes (in virtual
// time, exactly the slack); each stop adds itself and at most a stretch.
// A process held at every stretch (a container whose CPU quota its
// threads use up, each stretch seen a CFS period late; a node where every
// wake is 6 ms late or more) counts nothing, and gives up at its wall
// bound and the slack, each seen as late as the process runs: a call
// that hangs there is abandoned, and the drain's later steps run. A
// frozen process gives up on nothing until it runs again. A second stop
// that holds both a wait and one inside it through their last stretches
// ends them at one wake, and the outer one may then miss the inner one's
// result: no slack orders two waits a stop ends together.
//
// The slack sees its waiter's thread only. The kernel runs each thread of
// a process when that thread's CPU can: on a loaded node, and after a
// stop of the whole process (SIGSTOP, a cgroup freeze) when its threads
// wake together, it can hold the thread that runs the called function
// while the waiter's runs on time and counts. Measured at load 40 with two
// threads that wake every millisecond, over 20 stops of 150 ms (about 5 s):
// one thread was held while the other ran on time for up to 72 ms after a
// SIGCONT, up to 30 ms after a cgroup v1 thaw, up to 28 ms with no stop at
// all; a CPU quota (20 ms of every 100 ms) held one thread while the other
// ran at most 4 ms, the CPU's slice of the quota, as every CPU's runqueue
// of the cgroup is throttled when the quota runs out and refilled
// together. A call whose thread is held so, longer than pause's whole
// 20 ms after a stop, can be abandoned having had less running time than
// its slack. This is not counted: no wait can know which thread runs the
// goroutine it waits for, and a stretch that counted the holds of every
// thread of the process (their scheduler statistics, Linux's alone) would
// count nothing on a node where some thread of a busy server always waits
// for a CPU, giving up on every hung call at its wall bound (1.08 s for
// pause's 20 ms, where the slack is meant). A test whose call must not be
// abandoned runs its child on one P (GOMAXPROCS=1), so that the thread
// holding the call holds the wait too. (docs/faults.md rows 2861, 2941,
// 2940, 3020, 3021, 3240, 3320.)
package bounded
