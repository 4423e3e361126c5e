package follow

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errForced = errors.New("forced")

// Forced before the work begins, the reserve from now is the context's
// own deadline, which the work reads as it starts: nothing is told.
func TestReserveForcedBeforeIsTheContextsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		forced := make(chan struct{})
		close(forced)
		ctx, stop := Reserve(context.Background(), forced, func() time.Duration { return 3 * time.Second },
			func(time.Time) bool { t.Error("told a deadline the context already has"); return true }, errForced)
		defer stop()
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, 3*time.Second, dl.Sub(t0))
		<-ctx.Done()
		assert.Equal(t, 3*time.Second, time.Since(t0))
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		assert.ErrorIs(t, context.Cause(ctx), errForced)
	})
}

// Forced while the work runs, it is told the reserve from the force (read
// then) first, and its context ends there with the cause given.
func TestReserveForcedDuringToldFirstThenEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		forced := make(chan struct{})
		reserve := time.Minute
		var told []time.Duration
		var ctx context.Context
		ctx, stop := Reserve(context.Background(), forced, func() time.Duration { return reserve },
			func(dl time.Time) bool {
				assert.NoError(t, ctx.Err(), "told after the context ended")
				told = append(told, dl.Sub(t0))
				return true
			}, errForced)
		defer stop()
		_, ok := ctx.Deadline()
		assert.False(t, ok, "not forced: no deadline of its own")

		time.Sleep(10 * time.Second)
		reserve = 2 * time.Second
		close(forced)
		<-ctx.Done()
		assert.Equal(t, 12*time.Second, time.Since(t0))
		assert.Equal(t, []time.Duration{12 * time.Second}, told)
		assert.ErrorIs(t, context.Cause(ctx), errForced)
	})
}

// A tell that says the deadline did not move (an earlier one stands)
// leaves the context to that deadline and its cause.
func TestReserveNotMovedLeavesTheEarlierDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		parent, cancel := context.WithDeadline(context.Background(), t0.Add(5*time.Second))
		defer cancel()
		forced := make(chan struct{})
		ctx, stop := Reserve(parent, forced, func() time.Duration { return time.Second },
			func(time.Time) bool { return false }, errForced)
		defer stop()
		time.Sleep(4500 * time.Millisecond)
		close(forced)
		<-ctx.Done()
		assert.Equal(t, 5*time.Second, time.Since(t0))
		assert.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
	})
}

// stop ends the goroutine (goleak, TestMain) and cancels the context with
// context.Canceled; a force after it tells nothing.
func TestReserveStopEndsTheWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		forced := make(chan struct{})
		ctx, stop := Reserve(context.Background(), forced, func() time.Duration { return time.Second },
			func(time.Time) bool { t.Error("told after stop"); return true }, errForced)
		synctest.Wait()
		stop()
		close(forced)
		synctest.Wait()
		require.Error(t, ctx.Err())
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
	})
}
