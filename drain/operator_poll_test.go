package drain

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/deadline"
)

// An operator's look at the wait (?wait=0s, no ?start=) while the kubelet's
// httpGet call is still open is a poll of the run under way (row 403), not
// the hook's latest request: its answer does not close the kubelet's call.
// When the kubelet's grace runs out with its call still open, SIGTERM is the
// hook abandoned, SIGKILL 2 s later, as without the look.
//
//	0 ...... preStop GET /drain (the budget plans for 30 s)
//	2 s .... an operator: GET /drain?wait=0s, answered at once
//	4 s .... SIGTERM, the kubelet's call still open: SIGKILL at 6 s
func TestOperatorsPollDoesNotHideTheKubeletAbandoningTheHook(t *testing.T) {
	lookBesideAnOpenHook(t, "")
}

// The same look beside a shell loop's poll (an exec hook polling
// ?wait= without ?start=, row 403), open when the kubelet's grace runs out:
// SIGTERM is the hook abandoned, SIGKILL 2 s later, as without the look.
//
//	0 ...... the loop's poll: GET /drain?wait=20s (the budget plans for 30 s)
//	2 s .... an operator: GET /drain?wait=0s, answered at once
//	4 s .... SIGTERM, the loop's poll still open: SIGKILL at 6 s
func TestOperatorsPollDoesNotHideAShellLoopsAbandonedHook(t *testing.T) {
	lookBesideAnOpenHook(t, "?wait=20s")
}

// lookBesideAnOpenHook is the timeline of the two tests above, the hook's
// open call made with query: at 2 s an operator's ?wait=0s, answered with
// the wait going on; at 4 s SIGTERM, the hook's call still open: SIGKILL
// 2 s after SIGTERM.
func lookBesideAnOpenHook(t *testing.T, query string) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, margin: time.Second, sandboxes: 2, latency: 100 * time.Millisecond, limit: 2})
		hook := f.callPreStop(t.Context(), query)
		time.Sleep(2 * time.Second)
		look := f.callPreStop(t.Context(), "?wait=0s").wait(t)
		assert.False(t, look.Done, "the wait goes on")
		time.Sleep(2 * time.Second)
		rep := f.d.Shutdown(t.Context())
		<-hook.done
		assert.Equal(t, rep.Budget.SIGTERM.Add(deadline.MinimumGracePeriod), rep.Budget.Kill,
			"SIGKILL %v after SIGTERM", rep.Budget.Kill.Sub(rep.Budget.SIGTERM))
	})
}
