package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A pause still in flight at the preserve phase's deadline may, by pause's
// default (no Config.CancelAtDeadline), run on — but never into the reserve of a Critical
// step (the ublk teardown). Without Critical it may run until the budget's
// deadline, and the device step gets what is left.
//
//	SIGTERM (T0)        70 s preserve deadline   80 s pause ends        95 s budget deadline
//	preserve starts     critical: cut here,      non-critical: ublk
//	(estimate 1 s,      ublk gets 70..90 s       gets 12 of the 15 s left
//	 takes 80 s)                                 (shared 20:5 with http)
func TestCriticalStepReserveIsNeverSpentByInFlightPauses(t *testing.T) {
	for _, critical := range []bool{true, false} {
		name := map[bool]string{true: "critical", false: "not critical"}[critical]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var window time.Duration
				ublk := stepOf("ublk", 20*time.Second, critical, func(ctx context.Context) error {
					dl, _ := ctx.Deadline()
					window = time.Until(dl)
					return nil
				})
				http := step("http", 5*time.Second, func(context.Context) error { return nil })
				f := newFixture(t, fixtureOpts{grace: 100 * time.Second, margin: 5 * time.Second,
					sandboxes: 0, latency: 80 * time.Second, steps: []Step{ublk, http},
					edit: func(c *Config) {
						c.Pause.Estimator = deadline.NewEstimator(time.Second) // the estimate is wrong
						// CancelAtDeadline false, the default: the pause runs on past its deadline
					}})
				// No estimate of its own (pause.Estimated), which the reserve would count on.
				f.node.Add(&fakesandbox.Sandbox{Name: "sb-0", Latency: 80 * time.Second})
				t0 := time.Now()
				rep := f.d.Shutdown(context.Background())
				require.NotNil(t, rep.Preserve)
				pres := rep.Phase(PhasePreserve)
				assert.Equal(t, 70*time.Second, pres.Deadline.Sub(t0))
				if critical {
					assert.Equal(t, 1, rep.Preserve.Counts[pause.TimedOut], "cut where ublk's window begins")
					assert.Equal(t, 20*time.Second, window, "ublk got its whole reserve")
				} else {
					assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the pause ran on and finished")
					// 15 s left at 80 s for reserves of 20 s + 5 s: shared 20:5.
					assert.Equal(t, 12*time.Second, window, "ublk got only part of what the pause left")
				}
			})
		})
	}
}
