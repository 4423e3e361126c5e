package main

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// The plan and the Drainer's New decide alike what fits: a plan that says
// DOES NOT FIT is a server that New refuses to make, its shortfall the
// figure New's error names, and the smallest grace the plan names is the
// smallest New takes. Since rows 2540-2541,
// New counts the kubelet's 2 s after a preStop wait run on to SIGKILL
// (a grace of 1 s holds a round of 1 s); the plan, which lays the work
// out from SIGTERM, gets the same time: with no hook SIGKILL comes
// max(grace, 2 s) after SIGTERM, the budget keeping the same margin.
// With a preStop sleep both count what SIGTERM leaves once the kubelet's
// sleep is over (row 2820: New took the sleep for the drain's time, and
// made a Drainer of one preserve of 20 s in a grace of 30 s whose sleep of
// 20 s leaves 7 s).
//
//	no sleep: grace 1-12 s; sleep 1 s, 3 s, 20 s: grace from the sleep to 12 s more;
//	one round of 50 ms to 6 s, margin the default or 300 ms:
//	plan FITS          <=> drain.New accepts
//	plan's shortfall   == what New's error says the reserves need more (row 2900:
//	                      at a grace of 1 s New named the 500 ms from T0)
//	smallest grace     == the smallest whole grace drain.New accepts
func TestPlanAndNewAgreeOnWhatFits(t *testing.T) {
	minGrace := regexp.MustCompile(`smallest grace that fits\s+(\d+)s`)
	planShort := regexp.MustCompile(`shortfall\s+(\S+)\s+the work is this much longer`)
	seen := map[bool]int{} // New's answers: both are compared
	for _, sleep := range []time.Duration{0, time.Second, 3 * time.Second, 20 * time.Second} {
		least := max(int(sleep/time.Second), 1) // a longer sleep is no pod's: both refuse it
		for _, margin := range []time.Duration{0, 300 * time.Millisecond} {
			for est := 50 * time.Millisecond; est <= 6*time.Second; est += 250 * time.Millisecond {
				smallestNew := time.Duration(0)
				for g := least + 11; g >= least; g-- {
					grace := time.Duration(g) * time.Second
					short := newShortfall(t, grace, margin, sleep, est)
					accepted := short == 0
					seen[accepted]++
					if accepted {
						smallestNew = grace
					}
					args := []string{"plan", "-count", "1", "-concurrency", "1", "-estimate", est.String(), "-grace", strconv.Itoa(g)}
					if margin > 0 {
						args = append(args, "-margin", margin.String())
					}
					if sleep > 0 {
						args = append(args, "-prestop-sleep", sleep.String())
					}
					code, out, errw := drainkit(t, args...)
					require.Empty(t, errw)
					assert.Equal(t, accepted, code == exitOK, "grace %v, sleep %v, one round of %v, margin %v: New accepts %v\n%s", grace, sleep, est, margin, accepted, out)
					if !accepted {
						m := planShort.FindStringSubmatch(out)
						require.NotNil(t, m, out)
						assert.Equal(t, secs(short), m[1], "grace %v, sleep %v, one round of %v, margin %v: the plan's shortfall, New's figure %v\n%s", grace, sleep, est, margin, short, out)
					}
					if g == least && smallestNew > 0 {
						m := minGrace.FindStringSubmatch(out)
						require.NotNil(t, m, out)
						assert.Equal(t, strconv.Itoa(int(smallestNew/time.Second)), m[1], "sleep %v, one round of %v, margin %v", sleep, est, margin)
					}
				}
			}
		}
	}
	assert.Positive(t, seen[true], "plans New accepts")
	assert.Positive(t, seen[false], "plans New refuses")
}

// newShortfall is what drain.New's error says the reserves lack for one
// sandbox whose preserve is estimated at est, in a budget of grace whose
// preStop hook sleeps sleep (0: none), or 0 where New makes the Drainer.
func newShortfall(t *testing.T, grace, margin, sleep, est time.Duration) time.Duration {
	t.Helper()
	b, err := deadline.New(grace, deadline.Config{Margin: margin, PreStopSleep: sleep})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	node.AddN("sb", 1, est)
	_, err = drain.New(drain.Config{Budget: b, Sandboxes: node,
		Pause: pause.Config{Limit: 1, Estimator: deadline.NewEstimator(est)}})
	if err == nil {
		return 0
	}
	m := newShort.FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	short, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	require.Positive(t, short, "a refusal names what is missing")
	return short
}

var newShort = regexp.MustCompile(`the reserves need (\S+) more than`)
