package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// Fault (a review of deadline against the kubelet v1.34.4's killContainer):
// a SIGTERM time read before the preStop call's T0 was taken for a hook
// that ran a negative time, and its whole seconds were added to the grace.
// The two are read by two goroutines (the preStop handler, the SIGTERM
// handler), and a call the server takes up late, after the kubelet already
// sent SIGTERM, is read after it. The kubelet starts the hook before it
// sends SIGTERM, so its hook ran no less than nothing and it kills at most
// the grace after SIGTERM:
//
//	SIGTERM               T0 (the call, read late)          SIGKILL at the latest
//	|------- 3.5 s -------|                                  SIGTERM + G
//
// Before, with G = 30 s, SIGKILL was planned 33 s after SIGTERM and the
// deadline (30.05 s) came after the latest real SIGKILL; with G = 10 s and
// 2.3 s, SIGKILL at +12 s, the deadline at +10.5 s.
func TestSIGTERMReadBeforeThePreStopCallPlansNoLaterThanTheGrace(t *testing.T) {
	for _, tc := range []struct {
		grace, early time.Duration
	}{
		{30 * time.Second, 3500 * time.Millisecond},
		{10 * time.Second, 2300 * time.Millisecond},
	} {
		t.Run(tc.grace.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := deadline.New(tc.grace, deadline.Config{})
				require.NoError(t, err)
				sigterm := time.Now()
				time.Sleep(tc.early)
				t0 := time.Now()
				require.True(t, b.OnPreStop(t0))
				require.True(t, b.OnSIGTERM(sigterm))

				st := b.State()
				assert.Equal(t, t0, st.Start, "T0 stays the call's")
				assert.Equal(t, tc.grace, st.Kill.Sub(sigterm), "SIGKILL as for a hook that ran no time: G after SIGTERM")
				assert.Equal(t, st.Kill.Add(-st.Margin), st.Deadline, "the deadline keeps its margin before it")
				assert.LessOrEqual(t, st.Deadline.Sub(sigterm), tc.grace-1500*time.Millisecond, "at least 1.5 s before the latest SIGKILL")
			})
		})
	}
}
