package follow

import (
	"context"
	"sync"
	"time"
)

// Earlier returns ctx cancelled with cause at the deadline next last
// reported, and follows it as it moves earlier. next is called at once and
// again each time the channel changed returned is closed; changed is called
// before each call of next, so that a change between the two is not missed
// (as deadline.Budget.Changed requires). next reports a new, earlier
// deadline (true) after it did whatever must come before the context
// ends there, or false when the deadline did not move; it runs in
// Earlier's goroutine, one call at a time. A deadline already past cancels
// the context at once.
//
// stop ends the following and cancels the context with context.Canceled
// if it has not ended; it waits for the goroutine, so next is not called
// after stop returns. stop must be called once.
func Earlier(ctx context.Context, changed func() <-chan struct{}, next func() (time.Time, bool), cause error) (_ context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var timer *time.Timer
		var fire <-chan time.Time
		defer func() {
			if timer != nil {
				timer.Stop()
			}
		}()
		for {
			moved := changed() // before next: see the doc
			if dl, ok := next(); ok {
				if timer != nil {
					timer.Stop()
				}
				timer = time.NewTimer(time.Until(dl))
				fire = timer.C
			}
			select {
			case <-moved:
			case <-fire:
				cancel(cause)
				return
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	})
	return ctx, func() {
		close(done)
		wg.Wait()
		cancel(context.Canceled)
	}
}
