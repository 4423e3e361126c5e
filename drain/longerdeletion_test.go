package drain

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// longerDeletion is a node of 64 sandboxes that take 2 s each to preserve,
// 4 at a time (32 s of work), on a budget built with the manifest's 30 s,
// and the pod's API server in memory (so that it runs under synctest).
type longerDeletion struct {
	api  *fakeapiserver.Pod
	f    *fixture
	logs *logbuf.Buffer
}

func newLongerDeletion(t *testing.T, uid string) *longerDeletion {
	t.Helper()
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
	api.SetGrace(30)
	var logs logbuf.Buffer
	pod := podAs(t, api, uid, handlerTransport{api})
	f := newFixture(t, fixtureOpts{grace: 30 * time.Second, sandboxes: 64, latency: 2 * time.Second, limit: 4,
		edit: func(c *Config) { c.Pod, c.Logger = pod, slog.New(slog.NewTextHandler(&logs, nil)) }})
	return &longerDeletion{api: api, f: f, logs: &logs}
}

// deletedAtThePreStopCall deletes the pod with 600 s and calls the preStop
// handler, as the kubelet does then, and waits for the call's read.
func (n *longerDeletion) deletedAtThePreStopCall(t *testing.T) {
	t.Helper()
	n.api.Delete(time.Now(), 600*time.Second)
	n.f.callPreStop(t.Context(), "?wait=0s").wait(t)
	n.f.d.podReads.Wait()
}

// Fault (docs/faults.md row 1026): `kubectl drain --grace-period=600` (or
// kubectl delete) on a pod whose manifest says 30 s. The kubelet v1.34.4
// gives the deletion's grace in full (calculateEffectiveGracePeriod takes
// deletionGracePeriodSeconds for a pod not terminating yet, and the API
// server does not cap it by the spec): it waits for the hook up to 600 s
// and SIGKILLs at T0 + 600 s. The drain capped the deletion's grace at its
// budget's and planned SIGKILL at T0 + 30 s: it began preserving by then
// and lost the sandboxes 30 s could not preserve (40 of 64 here), with 570
// s left. Now the budget follows the deletionTimestamp.
//
//	0 s      the deletion (grace 600 s): the kubelet calls preStop, T0;
//	         the read: SIGKILL T0+600 s, not T0+30 s
//	~565 s   the preStop wait ends, leaving the preserves their 32 s
//	~598 s   64 preserved, the process exits; SIGKILL due at 600 s
func TestDeletionsLongerGraceIsTheKubelets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLongerDeletion(t, "uid-0")
		n.api.Delete(time.Now(), 600*time.Second)
		tl, rep := n.f.terminate(t, kubeletsim.HandlerHook{Handler: n.f.d.PreStop(), Path: "/drain"}, 600*time.Second)
		t.Logf("timeline:\n%s", tl)

		assert.Equal(t, 600*time.Second, rep.Budget.Kill.Sub(rep.Budget.Start), "SIGKILL planned at the deletionTimestamp, T0+600 s")
		assert.False(t, rep.Budget.Kill.After(tl.KillDue), "never after the kubelet's SIGKILL (%v)", tl.KillDue.Sub(tl.Start))
		assert.False(t, tl.HookKept, "the wait ended before the kubelet gave up on the hook")
		assert.False(t, tl.Killed)
		assert.Equal(t, 64, rep.Preserve.Counts[pause.Preserved], "%d lost", rep.Preserve.Lost())
		require.NoError(t, rep.Err())
		assert.Contains(t, n.logs.String(), "the pod's deletion gives a grace longer than the budget's, which the kubelet gives in full")
	})
}

// The same deletion with no preStop hook: T0 is SIGTERM, and the read at
// SIGTERM lands after the preserve phase laid its window out by the
// manifest's 30 s; the phase runs on in the window the budget moved
// (preservePhase), and the kubelet's SIGKILL is SIGTERM + 600 s.
func TestDeletionsLongerGraceWithoutAHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newLongerDeletion(t, "uid-0")
		n.api.Delete(time.Now(), 600*time.Second)
		tl, rep := n.f.terminate(t, nil, 600*time.Second)
		t.Logf("timeline:\n%s", tl)

		assert.Equal(t, 600*time.Second, rep.Budget.Kill.Sub(rep.Budget.Start))
		assert.False(t, rep.Budget.Kill.After(tl.KillDue))
		assert.False(t, tl.Killed)
		assert.Equal(t, 64, rep.Preserve.Counts[pause.Preserved], "%d lost", rep.Preserve.Lost())
		require.NoError(t, rep.Err())
	})
}

// The kubelet's rules that keep a longer grace out of the plan, pinned:
// each case plans SIGKILL at T0 + 30 s, early, never late, and says why
// once. A deletion after the termination began (the kubelet's own:
// graceful node shutdown, an eviction) can only shorten the kubelet's
// grace; a read whose pod's UID was not known before may be another
// pod's; a second deletion, shorter than the first's 600 s, leaves the
// first's (the kubelet keeps the grace it started with).
func TestDeletionsLongerGraceOnlyWhenItBeganTheTermination(t *testing.T) {
	for _, tc := range []struct {
		name string
		uid  string
		run  func(t *testing.T, n *longerDeletion) time.Duration // the SIGKILL wanted, from T0
		says string
	}{
		{"a read found no deletion first", "uid-0", func(t *testing.T, n *longerDeletion) time.Duration {
			n.f.callPreStop(t.Context(), "?wait=0s").wait(t) // the kubelet's own termination: T0
			n.f.d.podReads.Wait()
			n.api.Delete(time.Now(), 600*time.Second)
			n.f.d.readPod("test")
			n.f.d.podReads.Wait()
			return 30 * time.Second
		}, "a read found the pod with no deletionTimestamp first"},
		{"the deletion made after T0, no read between", "uid-0", func(t *testing.T, n *longerDeletion) time.Duration {
			n.api.Refuse(http.StatusServiceUnavailable)      // the read at preStop fails
			n.f.callPreStop(t.Context(), "?wait=0s").wait(t) // its reads are tried again every second
			time.Sleep(5 * time.Second)
			n.api.Delete(time.Now(), 600*time.Second)
			n.api.Refuse(0) // the retry a second later finds it
			time.Sleep(time.Second)
			synctest.Wait()
			return 30 * time.Second
		}, "the deletion was made 5s after T0"},
		{"the UID not known before the drain", "", func(t *testing.T, n *longerDeletion) time.Duration {
			n.deletedAtThePreStopCall(t)
			return 30 * time.Second
		}, "the pod's UID was not known before the drain"},
		{"a second, shorter deletion", "uid-0", func(t *testing.T, n *longerDeletion) time.Duration {
			n.deletedAtThePreStopCall(t)
			time.Sleep(10 * time.Second)
			n.api.Delete(time.Now(), 100*time.Second) // deletionTimestamp T0+100 s
			n.f.d.readPod("test")
			n.f.d.podReads.Wait()
			return 600 * time.Second
		}, "a second deletion shortened the pod's grace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := newLongerDeletion(t, tc.uid)
				t0 := time.Now()
				want := tc.run(t, n)
				assert.Equal(t, want, n.f.budget.Kill().Sub(t0))
				assert.Contains(t, n.logs.String(), tc.says)
				n.f.d.Force()
				rep := n.f.d.Shutdown(context.Background())
				assert.Equal(t, want, rep.Budget.Kill.Sub(t0), "and after SIGTERM's read")
			})
		})
	}
}
