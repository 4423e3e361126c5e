package follow

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// StartBy finds, from a context made from a Phase past a context that
// drops its cancel and deadline (a pause Run's Preserve context, which
// runs to the hard deadline), the Phase's deadline, as a move leaves it;
// from a context made from none, nothing.
func TestStartByIsThePhasesDeadlineAsItMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		phaseCtx, cancel := context.WithDeadline(t.Context(), t0.Add(10*time.Second))
		defer cancel()
		var d Deadline
		phase := d.Phase(phaseCtx)
		work, cancelWork := context.WithDeadline(context.WithoutCancel(&phase), t0.Add(30*time.Second))
		defer cancelWork()

		dl, ok := work.Deadline()
		assert.True(t, ok)
		assert.Equal(t, 30*time.Second, dl.Sub(t0), "the work's own deadline is later")
		by, ok := StartBy(work)
		assert.True(t, ok)
		assert.Equal(t, 10*time.Second, by.Sub(t0), "the phase's")

		d.Move(t0.Add(4 * time.Second))
		by, ok = StartBy(work)
		assert.True(t, ok)
		assert.Equal(t, 4*time.Second, by.Sub(t0), "as the move left it")

		_, ok = StartBy(phaseCtx)
		assert.False(t, ok, "made from no Phase")
		var none Deadline
		bare := none.Phase(context.WithoutCancel(t.Context()))
		_, ok = StartBy(&bare)
		assert.False(t, ok, "a Phase with no deadline")
	})
}

// A Phase is a Context: Changed finds the Deadline it follows.
func TestPhaseIsFollowedByChanged(t *testing.T) {
	var d Deadline
	phase := d.Phase(context.Background())
	ch, ok := Changed(&phase)
	assert.True(t, ok)
	d.Move(time.Now())
	select {
	case <-ch:
	default:
		t.Fatal("not closed by the move")
	}
}
