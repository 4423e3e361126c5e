package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/deadline"
)

// ShortfallFrom the first phase, the preStop wait, before SIGTERM says what
// the reserves lack from now, by the rule Shortfall measures the whole plan
// by from T0: the layout that lacks less, the wait run on to the kubelet's
// SIGKILL (SIGTERM there leaves 2 s, the budget keeps 1 s of them) or the
// budget's deadline. It counted only the second whenever the run-on layout
// did not hold, so at T0 it named another figure than Shortfall:
//
//	grace 1 s, one round of 1.2 s:
//	T0 ─ deadline +0.5 s                      700 ms short (before)
//	T0 ─── wait ─── SIGTERM +1 s ─ deadline +2 s: 1 s for the round: 200 ms short
//	at +400 ms: the run-on layout still 200 ms short (1.1 s from now before)
func TestShortfallFromThePreStopWaitIsWhatTheReservesLack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		round := 1200 * time.Millisecond
		b := newBudget(t, time.Second)
		p := newPlan(t, b, deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: func() time.Duration { return round }})
		assert.Equal(t, 200*time.Millisecond, p.ShortfallFrom("drain"), "before any event: the time T0 now leaves")
		t0 := time.Now()
		b.OnPreStop(t0)
		assert.Equal(t, 200*time.Millisecond, p.Shortfall())
		assert.Equal(t, p.Shortfall(), p.ShortfallFrom("drain"), "at T0 both measure the same")

		time.Sleep(400 * time.Millisecond)
		assert.Equal(t, 200*time.Millisecond, p.ShortfallFrom("drain"), "the wait still runs on to T0 + 1 s")
		round = time.Second + time.Millisecond
		assert.Equal(t, time.Millisecond, p.ShortfallFrom("drain"), "the reserves less the figure fit, less it but 1 ms do not")
		round = time.Second
		assert.Zero(t, p.ShortfallFrom("drain"))
	})
}
