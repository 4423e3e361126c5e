package drain

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// New's refusal names the layout its figure comes from, and that layout's
// numbers: "the reserves need X more than the Y that <span> leaves after
// the margin M". X is deadline.Plan.Shortfall; X + Y is the work; Y + M is
// the span the layout has before SIGKILL: the grace from T0, what a preStop
// sleep leaves after SIGTERM, or the kubelet's 2 s after SIGTERM for the
// wait run on to the end of the grace. New chose the layout by time
// arithmetic of its own, where the plan chooses it, and so named a sleep
// for a budget a preStop call had already anchored, which the plan counts
// from T0, the sleep none of its time (row 2820):
//
//	grace 30 s, sleep 20 s, anchored at a preStop call, one round of 30 s:
//	said:  "3s more than the 27s that deadline.Config.PreStopSleep 20s leaves
//	        of the grace period 30s after the margin 0s"  (27 + 0 is no 10 s)
//	plan:  from T0, 27 s after the margin 3 s: 3 s short
//
// Over graces of 1 to 4 s and 30 s, sleeps of none, 1, 3 and 20 s, margins
// the default and 300 ms, budgets unanchored and anchored at a preStop
// call, and rounds around them, New's figures are the plan's.
func TestNewShortfallNamesThePlansLayout(t *testing.T) {
	figure := regexp.MustCompile(`need (\S+) more than the (\S+) .*after the margin (\S+?)[,:]`)
	refusals := 0
	for _, grace := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 30 * time.Second} {
		for _, sleep := range []time.Duration{0, time.Second, 3 * time.Second, 20 * time.Second} {
			for _, margin := range []time.Duration{0, 300 * time.Millisecond} {
				for _, anchored := range []bool{false, true} {
					if sleep > grace || margin >= grace {
						continue
					}
					for round := grace / 4; round <= grace+3*time.Second; round += grace/8 + 100*time.Millisecond {
						where := func() string {
							return "grace " + grace.String() + ", sleep " + sleep.String() + ", margin " + margin.String() +
								", anchored " + map[bool]string{false: "no", true: "at a preStop call"}[anchored] + ", round " + round.String()
						}
						b, err := deadline.New(grace, deadline.Config{Margin: margin, PreStopSleep: sleep})
						require.NoError(t, err)
						if anchored {
							b.OnPreStop(time.Now())
						}
						p, err := deadline.NewPlan(b, deadline.Phase{Name: PhaseDrain}, deadline.Phase{Name: PhaseGate},
							deadline.Phase{Name: PhasePreserve, Reserve: deadline.Fixed(round)})
						require.NoError(t, err)
						short, st := p.Shortfall(), b.State()
						node := fakesandbox.NewNode()
						node.AddN("sb", 1, round)
						_, refused := New(Config{Budget: b, Sandboxes: node, Pause: pause.Config{Limit: 1, Estimator: deadline.NewEstimator(round)}})
						if short == 0 {
							assert.NoError(t, refused, where())
							continue
						}
						require.Error(t, refused, where())
						refusals++
						msg := refused.Error()
						m := figure.FindStringSubmatch(msg)
						require.NotNil(t, m, msg)
						x, y, mg := parseDur(t, m[1]), parseDur(t, m[2]), parseDur(t, m[3])
						assert.Equal(t, short, x, "%s: the plan's shortfall\n%s", where(), msg)
						assert.Equal(t, round, x+y, "%s: what is missing and what is left make the work\n%s", where(), msg)
						span := grace // from T0
						switch {
						case sleep > 0 && !anchored:
							span = deadline.KubeletRemaining(grace, sleep)
							assert.Contains(t, msg, "PreStopSleep "+sleep.String()+" leaves", where())
						case short < round-st.Deadline.Sub(st.Start): // less than from T0: the wait run on
							span = deadline.MinimumGracePeriod
							assert.Contains(t, msg, "the kubelet's 2s after SIGTERM", where())
						default:
							assert.Contains(t, msg, "the grace period "+grace.String()+" leaves after the margin", where())
						}
						assert.Equal(t, span, y+mg, "%s: what is left and the margin make the span the layout has\n%s", where(), msg)
					}
				}
			}
		}
	}
	assert.Positive(t, refusals)
}

func parseDur(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	require.NoError(t, err)
	return d
}
