package follow

import (
	"context"
	"sync"
	"time"
)

// Reserve returns ctx cancelled with cause a reserve after forced is
// closed: what a step, or the supervisor's device teardown, keeps once a
// Force (drain.Drainer.Force) leaves it its reserve alone. reserve is read
// when forced is closed.
//
// Closed already, the reserve from now is the context's own deadline
// (context.WithDeadlineCause), which work reads as it starts, and tell is
// not called. Closed later, Reserve's goroutine calls tell with the new
// deadline first, so that work running in the old one lays itself out
// again (Tighten) before the context ends, and cancels the context with
// cause there if tell reports the deadline moved: false leaves the
// context to the earlier deadline it already had, which ends it with its
// own cause. A nil forced never closes.
//
// stop ends the waiting and cancels the context with context.Canceled if
// it has not ended; it waits for the goroutine, so tell is not called
// after stop returns. stop must be called once.
func Reserve(ctx context.Context, forced <-chan struct{}, reserve func() time.Duration, tell func(time.Time) bool, cause error) (_ context.Context, stop context.CancelFunc) {
	select {
	case <-forced:
		return context.WithDeadlineCause(ctx, time.Now().Add(reserve()), cause)
	default:
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-forced:
		case <-done:
			return
		}
		dl := time.Now().Add(reserve())
		if !tell(dl) {
			return
		}
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		select {
		case <-t.C:
			cancel(cause)
		case <-done:
		}
	})
	return ctx, func() {
		close(done)
		wg.Wait()
		cancel(context.Canceled)
	}
}
