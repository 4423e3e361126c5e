package follow

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// movable is a deadline that moves earlier and closes its changed channel
// on each move, as deadline.Budget does.
type movable struct {
	mu      sync.Mutex
	dl      time.Time
	changed chan struct{}
}

func (m *movable) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *movable) move(dl time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dl = dl
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *movable) deadline() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dl
}

var errMoved = errors.New("moved")

// The context ends at the latest deadline, each earlier one told first,
// with the cause given; a move later is not followed.
func TestEarlierEndsAtTheLatestDeadlineEachMoveToldFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		m := &movable{dl: t0.Add(time.Minute), changed: make(chan struct{})}
		var told []time.Duration
		last := t0.Add(time.Hour)
		ctx, stop := Earlier(context.Background(), m.Changed, func() (time.Time, bool) {
			dl := m.deadline()
			if !dl.Before(last) {
				return time.Time{}, false
			}
			last = dl
			told = append(told, dl.Sub(t0))
			return dl, true
		}, errMoved)
		defer stop()

		time.Sleep(time.Second)
		m.move(t0.Add(10 * time.Second))
		time.Sleep(time.Second)
		m.move(t0.Add(20 * time.Second)) // later: not followed
		<-ctx.Done()

		assert.Equal(t, 10*time.Second, time.Since(t0))
		assert.ErrorIs(t, context.Cause(ctx), errMoved)
		assert.Equal(t, []time.Duration{time.Minute, 10 * time.Second}, told)
	})
}

// stop ends the goroutine (goleak, TestMain) and cancels the context with
// context.Canceled; no move is told after it.
func TestEarlierStopEndsTheFollowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &movable{dl: time.Now().Add(time.Minute), changed: make(chan struct{})}
		calls := 0
		ctx, stop := Earlier(context.Background(), m.Changed, func() (time.Time, bool) {
			calls++
			return time.Time{}, false
		}, errMoved)
		synctest.Wait()
		stop()
		m.move(time.Now())
		synctest.Wait()
		require.Error(t, ctx.Err())
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
		assert.Equal(t, 1, calls)
	})
}
