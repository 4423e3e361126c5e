package deadline_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// The manifest says 30 s, but the kubelet works with 10 s (a node-shutdown
// slice, an eviction, a second delete): the hook is abandoned at T0+10 s
// and SIGKILL follows 2 s after SIGTERM. OnSIGTERM alone would expect it at
// T0+30 s; OnHookAbandoned takes the kubelet's 2 s.
func TestHookAbandonedMeansSIGKILLTwoSecondsAfterSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		time.Sleep(10 * time.Second)
		require.True(t, b.OnHookAbandoned(time.Now()))
		st := b.State()
		assert.Equal(t, t0, st.Start)
		assert.Equal(t, 10*time.Second, st.SIGTERM.Sub(t0))
		assert.Equal(t, 12*time.Second, st.Kill.Sub(t0))
		assert.Equal(t, 11*time.Second, st.Deadline.Sub(t0), "the margin takes at most half of the 2 s")

		plain, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		plain.OnPreStop(t0)
		plain.OnSIGTERM(time.Now())
		assert.Equal(t, 30*time.Second, plain.Kill().Sub(t0), "what the budget assumed without it")
	})
}

// The hook overran the budget's own grace: OnSIGTERM already gives 2 s,
// and OnHookAbandoned changes nothing more. After OnSIGTERM it has no
// effect at all.
func TestHookAbandonedAgreesWithOnSIGTERMWhenTheGraceWasRight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(5*time.Second, deadline.Config{})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		time.Sleep(5 * time.Second)
		require.True(t, b.OnHookAbandoned(time.Now()))
		assert.Equal(t, 7*time.Second, b.Kill().Sub(t0))

		c, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		c.OnPreStop(t0)
		c.OnSIGTERM(time.Now())
		assert.False(t, c.OnHookAbandoned(time.Now()), "only the first SIGTERM counts")
		assert.Equal(t, 30*time.Second, c.Kill().Sub(t0))
	})
}

// A sleep hook of 4 s out of 10: the server sees nothing before SIGTERM;
// with Config.PreStopSleep the budget puts T0 4 s before it and SIGKILL 6 s
// after it, as the kubelet does (kubeletsim's Sleep hook agrees).
func TestPreStopSleepMovesT0BeforeSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(10*time.Second, deadline.Config{PreStopSleep: 4 * time.Second})
		require.NoError(t, err)
		at := time.Now()
		b.OnSIGTERM(at)
		st := b.State()
		assert.Equal(t, deadline.AnchorSIGTERM, st.Anchor)
		assert.Equal(t, -4*time.Second, st.Start.Sub(at))
		assert.Equal(t, 6*time.Second, st.Kill.Sub(at))

		long, err := deadline.New(10*time.Second, deadline.Config{PreStopSleep: 9500 * time.Millisecond})
		require.NoError(t, err)
		long.OnSIGTERM(at)
		assert.Equal(t, 2*time.Second, long.Kill().Sub(at), "the kubelet's 2 s floor")

		_, err = deadline.New(10*time.Second, deadline.Config{PreStopSleep: -time.Second})
		assert.ErrorContains(t, err, "deadline: Config.PreStopSleep must be >= 0, got -1s")
	})
}
