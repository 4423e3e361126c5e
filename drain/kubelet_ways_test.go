package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// The server's budget says 30 s; the kubelet uses 4 s (a node-shutdown
// slice, an eviction's grace, or a second delete: no deletionTimestamp to
// read in the first two). The kubelet gives up on the preStop call at
// T0+4 s and SIGKILLs at T0+6 s. SIGTERM arriving while that call is still
// open tells the Drainer so: its budget expects SIGKILL exactly when the
// simulator sends it, and the shutdown fits in the 2 s.
//
//	0 ........ preStop GET /drain (the server waits for its 30 s plan)
//	4 s ...... kubelet stops waiting: SIGTERM while the call is open
//	4-5 s .... 4 pauses of 100 ms, the daemon step, exit
//	6 s ...... SIGKILL due: not needed
func TestSIGTERMDuringAnOpenHookMeansTheKubeletsGraceRanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := false
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 3 * time.Second, sandboxes: 4,
			latency: 100 * time.Millisecond, limit: 4,
			steps: []Step{stepOf("daemon", 200*time.Millisecond, true, func(ctx context.Context) error { stopped = true; return nil })}})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.True(t, tl.HookKept, "the kubelet gave up on the hook")
		assert.False(t, tl.Killed, "exited before SIGKILL")
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "the budget knows the kubelet's SIGKILL")
		assert.Equal(t, 4, rep.Preserve.Counts["preserved"])
		assert.True(t, stopped, "the daemon step ran")
		assert.Positive(t, rep.Headroom)
	})
}

// The hook returned in time: SIGTERM finds no open call, and the budget
// keeps the kubelet's arithmetic (grace - whole seconds of the hook).
func TestSIGTERMAfterTheHookReturnedKeepsTheArithmetic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, margin: 2 * time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 10*time.Second)
		assert.False(t, tl.HookKept)
		assert.Equal(t, tl.KillDue, rep.Budget.Kill)
		assert.Greater(t, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), 2*time.Second, "more than the floor was left")
	})
}

// A sleep hook the server never sees: with deadline.Config.PreStopSleep the
// budget expects SIGKILL where the kubelet sends it.
func TestSleepHookDeclaredToTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, margin: 2 * time.Second, sandboxes: 2,
			latency: 100 * time.Millisecond, limit: 2, budget: deadline.Config{PreStopSleep: 4 * time.Second}})
		tl, rep := f.terminate(t, kubeletsim.Sleep(4*time.Second), 10*time.Second)
		assert.Equal(t, tl.KillDue, rep.Budget.Kill, "SIGTERM + 10 s - 4 s")
		assert.Equal(t, tl.Start, rep.Budget.Start, "T0 is the sleep's start")
	})
}
