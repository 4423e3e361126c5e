// Package follow ends a context at a deadline that can only move earlier:
// the deadline of a drain phase, or of the supervisor's device teardown,
// as a budget that moves SIGKILL earlier gives it (a read of the pod's
// deletion with a shorter grace). A context made once with
// context.WithDeadline takes the deadline as it stood; one made with
// Earlier is cancelled at the latest one, and its caller is told each
// move first, so that work laid out inside the old deadline (a teardown's
// kill kept for its end) is laid out again before the context ends.
//
//	ctx, stop := follow.Earlier(ctx, budget.Changed, func() (time.Time, bool) {
//		dl := budget.Deadline()
//		if !dl.Before(last) {
//			return time.Time{}, false
//		}
//		last = dl
//		teardown.Tighten(dl) // first: told before its context ends
//		return dl, true
//	}, errBudgetMoved)
//	defer stop()
//
// The goroutine that follows the deadline ends with stop, or once the
// context ended; stop waits for it, so that nothing is told a move after
// stop returns.
//
// A Deadline is that deadline as the work reads it: it only moves earlier
// (Move says whether it did), and the Context over it reports the earlier
// of its parent's deadline and the Deadline's as its own, so that work
// that plans by ctx.Deadline() (a teardown's stages, a Preserve's
// request timeout) plans for the time it has. drain's steps, pause's Runs
// and the supervisor's teardown and final sweep each hold one: a move
// comes first, the telling (Tighten) and the cancel after. Work that waits
// for the Deadline (escalate's wait after the signal, which must send
// SIGKILL KillWait before it) learns a move at once: Changed(ctx) is
// closed by the next move of the Deadline ctx follows.
//
// A Phase is a Context whose Deadline is also the time past which the
// work under it starts nothing new (a pause Run's phase deadline), while
// the work's own context may run on to a later one (a Preserve's, to the
// hard deadline): StartBy finds it from any context made from the Phase,
// so that a Preserve that sends a request again after a server's
// Retry-After (pause/httpsource) keeps to the rule the Run keeps.
//
// Reserve is the deadline a Force gives (drain.Drainer.Force: each step
// left keeps its reserve): a drain's step and the supervisor's teardown
// after the server exited on its own follow it the same way, the work
// told its new deadline first, then ended there.
package follow
