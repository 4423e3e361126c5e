package deadline_test

import (
	"log/slog"
	"strings"
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

// OnHookAbandoned is one change of the budget: SIGTERM and SIGKILL 2 s
// after it. It made two (OnSIGTERM's, then the 2 s), and in between a
// reader saw SIGKILL at the manifest's T0+30 s: the Logger wrote a line
// with it, a waiter woken by Changed could plan to it, and Changed fired
// twice.
func TestHookAbandonedIsOneChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		b, err := deadline.New(30*time.Second, deadline.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		time.Sleep(10 * time.Second)
		logs.Reset()
		changed := b.Changed()
		require.True(t, b.OnHookAbandoned(time.Now()))
		<-changed
		assert.Equal(t, 1, strings.Count(logs.String(), "budget changed"), "one change: %s", logs.String())
		assert.Contains(t, logs.String(), "kill="+t0.Add(12*time.Second).Format("2006-01-02T15:04:05.000Z07:00"))
		assert.NotContains(t, logs.String(), t0.Add(30*time.Second).Format("2006-01-02T15:04:05.000Z07:00"), "the SIGKILL before the 2 s")
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

		// A sleep of the whole grace, which the API server admits: the
		// kubelet's wait for the hook ends with it, and 2 s are left.
		whole, err := deadline.New(10*time.Second, deadline.Config{PreStopSleep: 10 * time.Second})
		require.NoError(t, err)
		whole.OnSIGTERM(at)
		assert.Equal(t, -10*time.Second, whole.Start().Sub(at))
		assert.Equal(t, 2*time.Second, whole.Kill().Sub(at))

		_, err = deadline.New(10*time.Second, deadline.Config{PreStopSleep: 10*time.Second + time.Millisecond})
		assert.ErrorContains(t, err, "Config.PreStopSleep (10.001s) must not be longer than the grace period 10s")

		_, err = deadline.New(10*time.Second, deadline.Config{PreStopSleep: -time.Second})
		assert.ErrorContains(t, err, "deadline: Config.PreStopSleep must be >= 0, got -1s")
	})
}
