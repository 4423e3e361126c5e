package drain

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// A pod whose preStop hook is a sleep (deadline.Config.PreStopSleep,
// DRAINKIT_PRESTOP_SLEEP) gets SIGTERM when the kubelet's sleep is over,
// and the drain's work starts then; SIGKILL comes max(grace - sleep, 2 s)
// after it. New counted the sleep as the drain's time and made Drainers
// whose one round of preserves the sleep leaves no time for:
//
//	grace 30 s, sleep 20 s, one preserve of 20 s  grace 3 s, sleep 1 s, one of 1.5 s
//	0 ..... T0: the kubelet sleeps                0 ..... T0: the kubelet sleeps
//	20 s .. SIGTERM: the preserve starts          1 s ... SIGTERM: the preserve starts
//	27 s .. the deadline: 7 s of 20, lost         2 s ... the deadline: 1 s of 1.5, lost
//	30 s .. SIGKILL                               3 s ... SIGKILL
//
// New now refuses them, naming the sleep, the grace and what is missing;
// what the sleep leaves time for it makes, and the drain preserves it
// before SIGKILL under the kubelet's sleep.
func TestNewRefusesWorkThePreStopSleepLeavesNoTimeFor(t *testing.T) {
	for _, c := range []struct {
		grace, sleep, refused, taken time.Duration
		want                         string
	}{
		{30 * time.Second, 20 * time.Second, 20 * time.Second, 6 * time.Second,
			"the reserves need 13s more than the 7s that deadline.Config.PreStopSleep 20s leaves of the grace period 30s after the margin 3s"},
		{3 * time.Second, time.Second, 1500 * time.Millisecond, 900 * time.Millisecond,
			"the reserves need 500ms more than the 1s that deadline.Config.PreStopSleep 1s leaves of the grace period 3s after the margin 1s"},
	} {
		t.Run("grace_"+c.grace.String()+"_sleep_"+c.sleep.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d, err := newSleepDrainer(t, c.grace, c.sleep, c.refused)
				if err == nil { // the fault: what the sleep left of the round
					_, rep := (&fixture{d: d}).terminate(t, kubeletsim.Sleep(c.sleep), c.grace)
					t.Fatalf("New took one preserve of %v; under the kubelet's sleep the Report says %d preserved, %d lost (%v)",
						c.refused, rep.Preserve.Counts[pause.Preserved], rep.Lost(), rep.Preserve.Counts)
				}
				assert.ErrorContains(t, err, c.want)
				assert.ErrorContains(t, err, "preserve "+c.refused.String()+" (Config.Pause.Estimator: 1 round of "+c.refused.String()+")")

				d, err = newSleepDrainer(t, c.grace, c.sleep, c.taken)
				require.NoError(t, err)
				tl, rep := (&fixture{d: d}).terminate(t, kubeletsim.Sleep(c.sleep), c.grace)
				assert.Equal(t, c.sleep, tl.SIGTERM.Sub(tl.Start), "SIGTERM once the sleep is over")
				assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
				assert.Zero(t, rep.Lost())
				assert.True(t, rep.End.Before(tl.KillDue), "done %v before SIGKILL", tl.KillDue.Sub(rep.End))
			})
		})
	}
}

// newSleepDrainer is New over one sandbox whose preserve takes work, in a
// budget of grace whose preStop hook sleeps sleep.
func newSleepDrainer(t *testing.T, grace, sleep, work time.Duration) (*Drainer, error) {
	t.Helper()
	b, err := deadline.New(grace, deadline.Config{PreStopSleep: sleep})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	node.AddN("sb", 1, work)
	return New(Config{Budget: b, Sandboxes: node, Pause: pause.Config{Limit: 1, Estimator: deadline.NewEstimator(work)}})
}

// NewServer, whose caller set no Config field, says the same in its own
// words: the preStop sleep and the variable that declares it.
func TestNewServerRefusesWorkThePreStopSleepLeavesNoTimeFor(t *testing.T) {
	logToDefault(t)
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvPreStopSleep, "20")
	t.Setenv(EnvPreserveEstimate, "20s")
	_, err := NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
	require.Error(t, err)
	assert.ErrorContains(t, err, "DRAINKIT_GRACE=30 (30s) is too short for one round of preserves and the steps' reserves: "+
		"the reserves need 13.75s more than the 7s that the preStop sleep 20s (DRAINKIT_PRESTOP_SLEEP, or the pod's spec) leaves of the grace period 30s after the margin 3s")
}
