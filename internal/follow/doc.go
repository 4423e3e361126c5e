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
package follow
