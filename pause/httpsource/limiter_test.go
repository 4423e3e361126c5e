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

// Fault: acquire's fast path gave a free slot at once without looking at
// by, so a pause queued again after an overload answer that came past the
// phase deadline was sent when another request had freed a slot between
// its release and its acquire (row 1281). A slot free past by is no
// reason to send: acquire fails with errSendBy and holds nothing.
//
//	0 s   "a" and "b" on the wire; by (the phase deadline) at 10 s
//	11 s  "a" answered overloaded (the limit goes to 1), "b" answered:
//	      a slot is free; "a" is queued again: not sent
func TestLimiterGivesNoFreeSlotPastTheSendByTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(0)
		by := time.Now().Add(10 * time.Second)
		require.NoError(t, l.acquire(t.Context(), by))
		require.NoError(t, l.acquire(t.Context(), by))
		time.Sleep(11 * time.Second)
		assert.Equal(t, 1, l.release(true, false), `"b" on the wire`)
		l.release(false, true)
		assert.ErrorIs(t, l.acquire(t.Context(), by), errSendBy)
		require.NoError(t, l.acquire(t.Context(), time.Time{}), "the slot is still free: the acquire that failed holds none")
	})
}
