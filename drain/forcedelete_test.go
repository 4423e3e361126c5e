package drain

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
)

// Fault (measured under the real kubelet and API server,
// internal/realkubelet's TestRealKubeletWithAPIServer/force_deletion): a
// force deletion (kubectl delete --force --grace-period=0) of a running
// pod removes it from the API server at once, so the drain's first read
// of it is a 404, which was a failed read: the budget stood at the
// manifest's grace. But the kubelet saw the deletion's grace of 0 before
// the removal and stops the container with its 2 s: sandboxd, no hook,
// 20 s, was SIGKILLed 2 s after SIGTERM in the middle of its preserves,
// with no Report. With the pod's UID known (its removal, not a name the
// API server never had), the drain now plans SIGKILL 2 s after SIGTERM:
//
//	0 s   force-deleted; the kubelet runs the hook with 1 s, if there is one
//	      the hook's read (or SIGTERM's, without a hook) finds no pod: SIGKILL planned at T0 + 2 s
//	1 s   SIGTERM after the hook (0 s without one): SIGKILL planned at SIGTERM + 2 s, the kubelet's
//	      (before: T0 + 20 s)
func TestForceDeletionBeforeAnyReadPlansTheKubeletsTwoSeconds(t *testing.T) {
	for _, hook := range []bool{false, true} {
		t.Run(map[bool]string{false: "no hook", true: "hook"}[hook], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"} // kube.Config.UID: the Downward API's
				api.Refuse(http.StatusNotFound)                                                    // force-deleted: gone already
				f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{})
				if hook {
					f.callPreStop(t.Context(), "?wait=0s").wait(t)
					time.Sleep(time.Second) // the kubelet's 1 s for the hook
				}
				sigterm := time.Now()
				rep := f.d.Shutdown(context.Background())
				assert.Equal(t, sigterm.Add(2*time.Second), rep.Budget.Kill, "SIGTERM + 2 s: SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
				assert.Len(t, rep.Preserve.Entries, 10, "every sandbox accounted for: %v", rep.Preserve.Counts)
				assert.Positive(t, rep.Headroom)
				assert.Contains(t, logs.String(), "the pod was removed from the API server before any read found its deletion")
				assert.NotContains(t, logs.String(), "could not be read")
			})
		})
	}
}
