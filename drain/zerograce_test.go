package drain

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// A pod whose spec.terminationGracePeriodSeconds is 0 gets 1 s from the
// kubelet ("no matter what, we always supply a grace period of 1",
// calculateEffectiveGracePeriod), SIGKILL 2 s after SIGTERM. With
// DRAINKIT_GRACE unset the server failed to start ("spec.terminationGrace
// PeriodSeconds is missing or not positive", the pod's spec "could not be
// read"), whatever its preserves took; it now plans the 1 s, says so, and
// drains in it when one round of preserves fits, and otherwise refuses as
// for any grace too short, naming the field.
func TestAZeroGraceInThePodsSpecIsTheKubeletsOneSecond(t *testing.T) {
	api := newPodAPI(t)
	api.SetGrace(0)
	inClusterOf(t, api)
	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreserveEstimate, "100ms")
	logs := logToDefault(t)
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)

	s, err := NewServer(&http.Server{Addr: "127.0.0.1:0", ReadHeaderTimeout: time.Second}, pause.Lister(node))
	require.NoError(t, err)
	assert.Equal(t, time.Second, s.Drainer().Budget().Grace())
	assert.Contains(t, logs.String(), "1 s, which the kubelet gives a 0 or a 1")

	sigs, code, _ := serveLoopback(s)
	sigs <- syscall.SIGTERM
	assert.Equal(t, 0, <-code)
	rep := s.Drainer().Shutdown(context.Background())
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved], "two 10 ms preserves fit in the 2 s the kubelet leaves after SIGTERM")
	assert.Equal(t, time.Second, rep.Budget.Grace)

	t.Setenv(EnvGrace, "30") // a variable that is not the spec's: the spec's 1 s, logged
	s, err = NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
	require.NoError(t, err)
	assert.Equal(t, time.Second, s.Drainer().Budget().Grace())

	t.Setenv(EnvGrace, "")
	t.Setenv(EnvPreserveEstimate, "") // a round of 1 s does not fit
	_, err = NewServer(&http.Server{Addr: "127.0.0.1:0"}, fakesandbox.NewNode())
	assert.ErrorContains(t, err, "drain: the pod's spec.terminationGracePeriodSeconds (1s, which the kubelet gives a 0 too) is too short")
}

// The same pod under a budget built with more than the spec's grace (drain.New's
// Budget, a server's -grace flag, DRAINKIT_GRACE not checked at start), terminated
// by the kubelet on its own (graceful node shutdown: no deletionTimestamp to read):
// the kubelet gives it 1 s, as for any spec grace, and the read at the preStop call
// is to cut the budget to it. The read took the 0 for no grace (kube.Deletion's
// SpecGrace zero) and the budget kept its 30 s: the wait ran on until the kubelet
// gave up on the hook at 1 s, SIGTERM then and SIGKILL 2 s after it.
func TestAZeroSpecGraceReadAtThePreStopCallCutsTheBudgetToOneSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := podWithoutDeletion(t, 0, 0)
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 100 * time.Millisecond, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2, edit: func(c *Config) { c.Pod = pod }})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.False(t, tl.HookKept, "the wait planned for the kubelet's 1 s, not the budget's 30 s")
		assert.Less(t, tl.SIGTERM.Sub(tl.Start), time.Second, "the wait ended before the kubelet gave up on it")
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "the budget knows the kubelet's SIGKILL")
		assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
	})
}

// A grace of 1 s (a spec's 0 or 1, a hard eviction, kubectl delete --now)
// and one round of preserves at 1 s: New refused it, "the reserves need
// 500ms more than the 500ms the grace period 1s leaves after the margin",
// counting from T0 to the budget's deadline. The kubelet leaves 2 s after
// SIGTERM whenever the hook returns, the budget keeps 1 s of them, and the
// round fits there.
//
//	0 ...... preStop: the wait runs until the kubelet gives up on it (1 s)
//	0.7 s .. the wait ends (300 ms for SIGTERM): SIGTERM, SIGKILL due 2.7 s
//	1.6 s .. the 900 ms preserve done, exit
func TestOneRoundThatTheKubeletsTwoSecondsAfterSIGTERMHoldIsTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: time.Second, latency: time.Second, limit: 4}) // one round of 1 s
		f.node.Add(&fakesandbox.Sandbox{Name: "sb", Latency: 900 * time.Millisecond})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.False(t, tl.Killed, "exited before SIGKILL")
		assert.Equal(t, 2*time.Second, tl.KillDue.Sub(tl.SIGTERM), "the kubelet's 2 s")
		require.NotNil(t, rep.Preserve)
		assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved])
	})
}
