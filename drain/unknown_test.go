package drain

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: the listing fails every time (the runtime's API answers 500).
// Twenty sandboxes run, none is preserved, and no entry is lost because
// none was ever listed: the preserve phase is Failed, not OK, and the
// Report's error says the sandboxes are unknown, with the last error.
func TestFailedListingIsUnknownNotSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: 2 * time.Second,
			sandboxes: 20, latency: time.Second, limit: 4})
		f.node.ListErr = func(int) error { return errors.New("500 Internal Server Error") }
		rep := f.d.Shutdown(context.Background())
		assert.Zero(t, rep.Lost())
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		assert.Equal(t, Failed, pres.Result)
		assert.Contains(t, pres.Error, "unknown")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "500 Internal Server Error")
	})
}

// Fault found under the real kubelet: the kubelet's grace ran out while
// the preStop hook was still open, which leaves the 2 s floor; the
// critical device step's reserve takes all of it, the preserve window is
// empty and the Preserver cannot list before its deadline. The sandboxes
// the preStop wait counted are still accounted for: each is in the
// Report, not started, and lost — not "unknown".
func TestEmptyPreserveWindowStillAccountsForTheCountedSandboxes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		daemon := stepOf("ublk", 2*time.Second, true, func(context.Context) error { return nil })
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second,
			sandboxes: 4, latency: time.Second, limit: 4, steps: []Step{daemon}})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 4*time.Second)
		require.True(t, tl.HookKept, "the kubelet gave up on the hook")
		pres := rep.Phase(PhasePreserve)
		require.NotNil(t, pres)
		require.Zero(t, pres.Deadline.Sub(pres.Start), "the critical step took the whole window")
		require.NotNil(t, rep.Preserve)
		assert.False(t, rep.Preserve.Unknown, "the preStop wait's count listed them")
		require.Len(t, rep.Preserve.Entries, 4)
		for _, e := range rep.Preserve.Entries {
			assert.Equal(t, pause.NotStarted, e.Outcome, e.ID)
			assert.Zero(t, e.Pass, "listed by the drain's count, not by a pass")
			assert.Contains(t, e.Error, "count")
		}
		assert.Equal(t, 4, rep.Lost())
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "4 of 4 sandboxes not preserved")
	})
}
