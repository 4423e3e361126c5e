package follow

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Deadline has none until moved, moves only earlier, and says whether
// each Move moved it.
func TestDeadlineMovesOnlyEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var d Deadline
		_, ok := d.Get()
		require.False(t, ok, "the zero Deadline has none")

		assert.True(t, d.Move(t0.Add(time.Minute)), "the first Move sets it")
		assert.False(t, d.Move(t0.Add(2*time.Minute)), "later: not moved")
		assert.False(t, d.Move(t0.Add(time.Minute)), "the same: not moved")
		assert.True(t, d.Move(t0.Add(10*time.Second)), "earlier: moved")
		got, ok := d.Get()
		require.True(t, ok)
		assert.Equal(t, 10*time.Second, got.Sub(t0))
	})
}

// Of moves racing from many goroutines, the earliest stands, and the
// move to it says it moved.
func TestDeadlineConcurrentMovesKeepTheEarliest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var d Deadline
		var wg sync.WaitGroup
		var moved [64]bool
		for i := range moved {
			wg.Go(func() { moved[i] = d.Move(t0.Add(time.Duration(i+1) * time.Second)) })
		}
		wg.Wait()
		got, ok := d.Get()
		require.True(t, ok)
		assert.Equal(t, time.Second, got.Sub(t0), "the earliest of the moves")
		assert.True(t, moved[0], "the move to the earliest moved it")
	})
}

// Cap is the earlier of the deadline given and d's, where either may be
// missing.
func TestDeadlineCapIsTheEarlierOfTheTwo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var d Deadline
		got, ok := d.Cap(time.Time{}, false)
		assert.False(t, ok, "neither has one")
		assert.True(t, got.IsZero())
		got, ok = d.Cap(t0.Add(time.Minute), true)
		assert.True(t, ok)
		assert.Equal(t, time.Minute, got.Sub(t0), "d has none: the one given")

		d.Move(t0.Add(10 * time.Second))
		got, ok = d.Cap(time.Time{}, false)
		assert.True(t, ok)
		assert.Equal(t, 10*time.Second, got.Sub(t0), "none given: d's")
		got, _ = d.Cap(t0.Add(time.Minute), true)
		assert.Equal(t, 10*time.Second, got.Sub(t0), "d's is earlier")
		got, _ = d.Cap(t0.Add(time.Second), true)
		assert.Equal(t, time.Second, got.Sub(t0), "the one given is earlier")
	})
}

// A Context's Deadline follows its Deadline's moves, bounded by its
// parent's; its Done and Err are its parent's, which ends at its own
// deadline, not at the one the Context reports.
func TestContextReportsTheEarlierDeadlineAndEndsAsItsParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		parent, cancel := context.WithDeadline(context.Background(), t0.Add(time.Minute))
		defer cancel()
		var d Deadline
		ctx := d.Context(parent)

		dl, ok := ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, time.Minute, dl.Sub(t0), "not moved: the parent's")

		d.Move(t0.Add(10 * time.Second))
		dl, _ = ctx.Deadline()
		assert.Equal(t, 10*time.Second, dl.Sub(t0), "moved: read at each call")
		d.Move(t0.Add(2 * time.Minute))
		dl, _ = ctx.Deadline()
		assert.Equal(t, 10*time.Second, dl.Sub(t0), "a later move is no move")

		time.Sleep(30 * time.Second)
		require.NoError(t, ctx.Err(), "it ends as its parent does, not at the deadline it reports")
		<-ctx.Done()
		assert.Equal(t, time.Minute, time.Since(t0))
		assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)

		bg := d.Context(context.Background())
		dl, ok = bg.Deadline()
		assert.True(t, ok, "a parent without a deadline: d's")
		assert.Equal(t, 10*time.Second, dl.Sub(t0))
	})
}

// Held as a field and passed as a pointer, a Context is the context of
// the work: Earlier ends it at the deadline it moves, which the work read
// as its Deadline before (the use it is made for).
func TestContextOverEarlierEndsAtTheDeadlineItReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		m := &movable{dl: t0.Add(time.Minute), changed: make(chan struct{})}
		var d Deadline
		ctx, stop := Earlier(context.Background(), m.Changed, func() (time.Time, bool) {
			dl := m.deadline()
			return dl, d.Move(dl)
		}, errMoved)
		defer stop()
		work := struct{ ctx Context }{d.Context(ctx)}
		var c context.Context = &work.ctx

		synctest.Wait()
		dl, _ := c.Deadline()
		assert.Equal(t, time.Minute, dl.Sub(t0))
		m.move(t0.Add(10 * time.Second))
		synctest.Wait()
		dl, _ = c.Deadline()
		assert.Equal(t, 10*time.Second, dl.Sub(t0))
		<-c.Done()
		assert.Equal(t, 10*time.Second, time.Since(t0))
		assert.ErrorIs(t, context.Cause(c), errMoved)
	})
}

// A child of a Context registers with its parent's cancelCtx, as a child
// of the parent would: no goroutine watches it.
func TestContextChildNeedsNoGoroutine(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	var d Deadline
	ctx := d.Context(parent)
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	for range 16 {
		_, c := context.WithCancel(ctx)
		cancels = append(cancels, c)
	}
	assert.Equal(t, before, runtime.NumGoroutine())
	cancel()
	for _, c := range cancels {
		c()
	}
}

// Changed is closed by the next move, not by a Move that does not move d,
// and a move between asking for it and reading d is not missed.
func TestDeadlineChangedIsClosedByTheNextMove(t *testing.T) {
	t0 := time.Now()
	var d Deadline
	ch := d.Changed()
	_, ok := d.Get()
	require.False(t, ok, "asking for the channel sets no deadline")
	require.True(t, d.Move(t0.Add(time.Minute)))
	assertClosed(t, ch, "the first move")

	ch = d.Changed()
	assert.Equal(t, ch, d.Changed(), "one channel until the next move")
	require.False(t, d.Move(t0.Add(2*time.Minute)))
	assertOpen(t, ch, "a later deadline is no move")
	dl, _ := d.Get()
	assert.Equal(t, time.Minute, dl.Sub(t0), "asking for the channel keeps the deadline")

	ch = d.Changed()
	d.Move(t0.Add(time.Second)) // between Changed and the read
	assertClosed(t, ch, "a move after Changed")
	dl, _ = d.Get()
	assert.Equal(t, time.Second, dl.Sub(t0))
}

// Of moves racing Changed from many goroutines, each channel is closed by
// a move made after it was handed out: none twice (a panic), none missed.
// Looked at once every Move has returned: the move that closes a channel
// may be another goroutine's, which has swapped the state and not yet
// closed it as this one's own Move returns (the cold CI run of stop 54
// failed on that, at load).
func TestDeadlineChangedRacingMoves(t *testing.T) {
	t0 := time.Now()
	var d Deadline
	var wg sync.WaitGroup
	var mu sync.Mutex
	var moved []<-chan struct{} // handed out before a move of its taker's own
	for i := range 64 {
		wg.Go(func() { d.Move(t0.Add(time.Duration(64-i) * time.Second)) })
		wg.Go(func() {
			ch := d.Changed()
			before, _ := d.Get()
			if d.Move(before.Add(-time.Millisecond)) { // a move of its own, after it asked
				mu.Lock()
				moved = append(moved, ch)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NotEmpty(t, moved)
	for _, ch := range moved {
		assertClosed(t, ch, "the move after Changed")
	}
}

// Changed(ctx) finds the Deadline a Context follows through the contexts
// made from it, and Contexts over the same Deadline as one; it says
// nothing for a context that follows none or two.
func TestChangedFindsTheDeadlineAContextFollows(t *testing.T) {
	t0 := time.Now()
	var d, other Deadline
	work := d.Context(context.WithoutCancel(d.Context(context.Background()))) // a pause Run's work over its phase
	child, cancel := context.WithCancel(context.WithValue(work, testKey{}, 1))
	defer cancel()
	ch, ok := Changed(child)
	require.True(t, ok)
	d.Move(t0.Add(time.Second))
	assertClosed(t, ch, "the Deadline its Deadline follows moved")

	_, ok = Changed(context.Background())
	assert.False(t, ok, "a context's own deadline does not move")
	_, ok = Changed(other.Context(work))
	assert.False(t, ok, "two Deadlines: no one channel")
	assert.Equal(t, 1, child.Value(testKey{}), "other values pass through")
}

// testKey is a key of the tests' own values.
type testKey struct{}

func assertClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Errorf("not closed: %s", msg)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
		t.Errorf("closed: %s", msg)
	default:
	}
}
