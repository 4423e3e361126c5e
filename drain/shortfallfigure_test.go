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

// New's error names how much time the reserves lack (row 2900), what an operator
// reads to size the work or the grace. At a grace of 1 s the verdict
// counts the preStop wait run on to SIGKILL, where SIGTERM leaves the
// kubelet's 2 s and the budget keeps 1 s of them (row 2541), but the
// figure fell back to the 500 ms from T0 to the budget's deadline:
//
//	grace 1 s, one round of 1.2 s
//	from T0 ........ 500 ms: 700 ms short (what the error said)
//	wait run on .... 1 s after SIGTERM: 200 ms short (what is missing)
//
// For graces of 1, 2 and 3 s and rounds around them, the figure is exact:
// the round shorter by it fits, and shorter by one millisecond less does
// not.
func TestNewShortfallNamesTheTimeReallyMissing(t *testing.T) {
	figure := regexp.MustCompile(`need (\S+) more than the (\S+) `)
	for _, grace := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		for round := 500 * time.Millisecond; round <= 3*time.Second; round += 100 * time.Millisecond {
			refused := newOneRound(t, grace, round)
			if refused == nil {
				continue
			}
			m := figure.FindStringSubmatch(refused.Error())
			require.NotNil(t, m, refused.Error())
			short, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			left, err := time.ParseDuration(m[2])
			require.NoError(t, err)
			assert.Equal(t, round, left+short, "grace %v, round %v: what is left and what is missing make the round", grace, round)
			if grace == time.Second { // the wait run on: SIGTERM at 1 s, the budget keeps 1 s of the kubelet's 2 s
				assert.Contains(t, refused.Error(), "than the 1s that the kubelet's 2s after SIGTERM leave after the margin 1s, the preStop wait run on to the end of the grace period 1s:")
			} else {
				assert.Contains(t, refused.Error(), "the grace period "+grace.String()+" leaves after the margin")
			}
			assert.NoError(t, newOneRound(t, grace, round-short), "grace %v, round %v, %v short: the round %v less fits", grace, round, short, short)
			assert.Error(t, newOneRound(t, grace, round-short+time.Millisecond), "grace %v, round %v, %v short: 1 ms less than it does not fit", grace, round, short)
		}
	}
}

// newOneRound is New's answer for one sandbox preserved in one round of
// round, in a grace of grace.
func newOneRound(t *testing.T, grace, round time.Duration) error {
	t.Helper()
	b, err := deadline.New(grace, deadline.Config{})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	node.AddN("sb", 1, round)
	_, err = New(Config{Budget: b, Sandboxes: node, Pause: pause.Config{Limit: 1, Estimator: deadline.NewEstimator(round)}})
	return err
}
