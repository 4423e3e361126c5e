package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// A preStop sleep hook (Config.PreStopSleep) is the kubelet's time, not
// the server's: the kubelet sleeps from T0 and sends SIGTERM at T0 +
// sleep, where the drain's work starts, then SIGKILL max(grace - sleep,
// 2 s) later. Shortfall, which drain.New refuses a plan by, counted the
// reserves from T0 and took the sleep for work time:
//
//	grace 30 s, sleep 20 s         grace 3 s, sleep 1 s
//	0 ..... T0: the kubelet sleeps  0 ..... T0: the kubelet sleeps
//	20 s .. SIGTERM: work starts    1 s ... SIGTERM: work starts
//	27 s .. deadline (margin 3 s)   2 s ... deadline (margin 1 s, half of 2 s)
//	30 s .. SIGKILL                 3 s ... SIGKILL
//	7 s for the work, not 27 s      1 s for the work, not 1.5 s
//
// It now counts from SIGTERM, before it comes and once it has; a budget
// anchored by a preStop call (an httpGet or exec hook, no sleep) still
// counts from T0.
func TestShortfallCountsFromTheSIGTERMAPreStopSleepLeaves(t *testing.T) {
	for _, c := range []struct {
		grace, sleep, work, short time.Duration
	}{
		{30 * time.Second, 20 * time.Second, 20 * time.Second, 13 * time.Second},
		{30 * time.Second, 20 * time.Second, 7 * time.Second, 0},
		{3 * time.Second, time.Second, 1500 * time.Millisecond, 500 * time.Millisecond},
		{3 * time.Second, time.Second, time.Second, 0},
		{20 * time.Second, 20 * time.Second, 1500 * time.Millisecond, 500 * time.Millisecond}, // SIGKILL 2 s after SIGTERM, 1 s kept
	} {
		t.Run("grace_"+c.grace.String()+"_sleep_"+c.sleep.String()+"_work_"+c.work.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := deadline.New(c.grace, deadline.Config{PreStopSleep: c.sleep})
				require.NoError(t, err)
				p := newPlan(t, b, deadline.Phase{Name: "drain"},
					deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(c.work)})
				assert.Equal(t, c.short, p.Shortfall(), "before any event (drain.New)")

				time.Sleep(c.sleep) // the kubelet's sleep
				b.OnSIGTERM(time.Now())
				assert.Equal(t, c.short, p.Shortfall(), "at SIGTERM")
				assert.Equal(t, c.short, p.ShortfallFrom("preserve"), "what the running drain finds")
			})
		})
	}
}

// A budget anchored by a preStop call is no sleep hook's (the kubelet runs
// one preStop handler): the preStop wait is the server's own time, and
// Shortfall counts from T0 as before.
func TestShortfallOfAPreStopCallCountsFromT0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{PreStopSleep: 20 * time.Second})
		require.NoError(t, err)
		p := newPlan(t, b, deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(20 * time.Second)})
		b.OnPreStop(time.Now())
		assert.Zero(t, p.Shortfall(), "27 s from T0 hold 20 s")
	})
}
