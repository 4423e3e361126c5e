package httpsource

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimiterLowersToWhatTheServerHandled(t *testing.T) {
	l := newLimiter(0)
	ctx := t.Context()
	for range 4 {
		require.NoError(t, l.acquire(ctx, time.Time{}))
	}
	assert.Equal(t, 3, l.release(true, false), "three others were on the wire")
	assert.Equal(t, 3, l.current())
	l.release(true, false)
	assert.Equal(t, 2, l.current(), "each overload answer lowers to the others in flight")
	l.release(true, false)
	l.release(true, false) // the last one alone: never below 1
	assert.Equal(t, 1, l.current())
}

func TestLimiterHandsAFreedSlotToTheOldestWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(1)
		require.NoError(t, l.acquire(t.Context(), time.Time{}))
		var order []int
		for i := range 3 {
			go func() {
				if l.acquire(t.Context(), time.Time{}) == nil {
					order = append(order, i)
					l.release(false, true)
				}
			}()
			synctest.Wait() // i queues before i+1
		}
		l.release(false, true)
		synctest.Wait()
		assert.Equal(t, []int{0, 1, 2}, order)
	})
}

func TestLimiterAcquireGivesUpAtTheDeadlineAndHoldsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(1)
		require.NoError(t, l.acquire(t.Context(), time.Time{}))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		assert.ErrorIs(t, l.acquire(ctx, time.Time{}), context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
		l.release(false, true)
		require.NoError(t, l.acquire(t.Context(), time.Time{}), "the slot is free again: the waiter that gave up left the queue")
	})
}

func TestLimiterProbesUpAfterAStreakOfSuccesses(t *testing.T) {
	l := newLimiter(3)
	ctx := t.Context()
	require.NoError(t, l.acquire(ctx, time.Time{}))
	require.NoError(t, l.acquire(ctx, time.Time{}))
	l.release(true, false)
	assert.Equal(t, 1, l.current())
	l.release(false, false) // a 500: neither overload nor success
	for i := range probeAfter {
		require.NoError(t, l.acquire(ctx, time.Time{}))
		assert.Equal(t, 1, l.current(), "success %d", i)
		l.release(false, true)
	}
	assert.Equal(t, 2, l.current())
	for range 10 * probeAfter {
		require.NoError(t, l.acquire(ctx, time.Time{}))
		l.release(false, true)
	}
	assert.Equal(t, 3, l.current(), "never above the cap")
}
