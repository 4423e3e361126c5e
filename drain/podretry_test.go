package drain

import (
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// Fault (the review of the pod's reads): a drain with a preStop hook read
// the pod's deletion at the hook's call and again only at SIGTERM (it
// polls only without a hook), so one failed read at the call (a 503 of an
// API server restarting, a read timing out) left the manifest's grace in
// the plan for the whole preStop wait: the wait ran on past the deletion's
// shorter grace, the kubelet gave up on the hook and SIGTERM left the
// preserves its 2 s. A failed read at a call is now read again, every
// second, until one succeeds or the wait ends:
//
//	0 s   kubectl delete --grace-period=8 (manifest: 20 s); the hook's read: 503
//	1 s   read again: SIGKILL at T0 + 8 s; the wait ends for 4 preserves of 1 s
//	      (before: the wait planned for 20 s, the kubelet gave up on it at 8 s,
//	      SIGKILL at 10 s: 1 preserved, 3 lost)
func TestFailedReadAtTheHookIsReadAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 8*time.Second)
		var reads atomic.Int32
		flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && reads.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable) // the API server restarting
				return
			}
			api.ServeHTTP(w, r)
		})
		f, logs := pollFixture(t, api, handlerTransport{flaky}, 4, fixtureOpts{})
		tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 8*time.Second)
		t.Logf("timeline:\n%s", tl)
		assert.False(t, tl.HookKept, "the wait ended in time: the kubelet did not give up on it")
		assert.Equal(t, t0.Add(8*time.Second), rep.Budget.Kill, "T0+%v", rep.Budget.Kill.Sub(t0))
		assert.Equal(t, 4, rep.Preserve.Counts["preserved"], "%v", rep.Preserve.Counts)
		assert.Positive(t, rep.Headroom)
		assert.Contains(t, logs.String(), "could not be read")
	})
}
