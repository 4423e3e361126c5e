package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

// Fault (the review of row 580): a POD_NAME that names another pod (or no
// pod) with the right POD_UID, or a POD_UID that is not the pod's, made
// every drain's first read a 404 or kube.ErrPodReplaced before any deletion
// was read, which row 580 takes for a force deletion: SIGKILL planned 2 s
// after SIGTERM on every drain, a misconfiguration silently turned into a
// force-deletion drain (10 preserves of 1 s cut to one). The read at start,
// the pod running, already showed the name is not this pod's: the drain now
// says so at New (Error) and in the Report (PodMismatch, in Err), and a
// later 404 or another UID is a failed read, the budget standing:
//
//	0 s   start: the pod read once before New (as ConfigFromEnv reads its spec):
//	      the name does not name the pod of POD_UID
//	      SIGTERM, no hook, at the same instant (New, not a clock, divides start
//	      from drain): the read finds the same; SIGKILL stays at SIGTERM + 20 s
//	      (before: + 2 s)
func TestMisconfiguredPodNameOrUIDIsNotAForceDeletion(t *testing.T) {
	for _, c := range []struct {
		name string
		api  *fakeapiserver.Pod // what the API server has under POD_NAME
		uid  string             // POD_UID
		gone bool               // no pod of the name
	}{
		{"POD_NAME names another pod", &fakeapiserver.Pod{Name: "sandboxd-1", Namespace: "agentenv", UID: "uid-1"}, "uid-0", false},
		{"POD_NAME names no pod", &fakeapiserver.Pod{Name: "sandboxd-x", Namespace: "agentenv", UID: "uid-x"}, "uid-0", true},
		{"POD_UID is not the pod's", &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}, "uid-typo", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				if c.gone {
					c.api.Refuse(http.StatusNotFound)
				}
				var startErr error
				f, logs := pollFixture(t, c.api, handlerTransport{c.api}, 10, fixtureOpts{edit: func(cfg *Config) {
					cfg.Pod = podAs(t, c.api, c.uid, handlerTransport{c.api})
					_, startErr = cfg.Pod.Spec(t.Context()) // the read at start
				}})
				require.Error(t, startErr)
				assert.Contains(t, logs.String(), "level=ERROR", "said at start: %s", logs.String())

				sigterm := time.Now()
				rep := f.d.Shutdown(context.Background())
				assert.Equal(t, sigterm.Add(20*time.Second), rep.Budget.Kill, "the budget stands: SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
				assert.Equal(t, 10, rep.Preserve.Counts["preserved"], "%v", rep.Preserve.Counts)
				assert.Contains(t, rep.PodMismatch, c.uid)
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), c.uid)
				assert.NotContains(t, logs.String(), "before any read found its deletion", "not taken for a force deletion")
				assert.Regexp(t, `msg="drain: SIGTERM: plan" .*pod_mismatch=`, logs.String(), "the plan says it")
			})
		})
	}
}

// A force deletion is still one (row 580) when the read at start found the
// pod, and when it failed (no identity learned): the kubelet's 2 s.
func TestForceDeletionAfterAReadAtStartPlansTheKubeletsTwoSeconds(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
				if status != http.StatusOK {
					api.Refuse(status)
				}
				f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{edit: func(cfg *Config) {
					_, err := cfg.Pod.Spec(t.Context())
					assert.Equal(t, status == http.StatusOK, err == nil, "%v", err)
				}})
				time.Sleep(time.Second)
				api.Refuse(http.StatusNotFound) // force-deleted
				sigterm := time.Now()
				rep := f.d.Shutdown(context.Background())
				assert.Equal(t, sigterm.Add(2*time.Second), rep.Budget.Kill, "SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
				assert.Empty(t, rep.PodMismatch)
				assert.Contains(t, logs.String(), "before any read found its deletion")
			})
		})
	}
}

// A read after New, at the hook's call (a HookGuard's RequireTerminating,
// before the drain reads), that finds the pod gone is the force deletion's
// too, not a misconfiguration found at start: only reads before New are
// start's. (Kept at the drain's first read instead, the guard's 404 was
// taken for a wrong name: SIGKILL planned at SIGTERM + 20 s.)
func TestForceDeletionReadFirstByTheHookGuardPlansTheKubeletsTwoSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{})
		api.Refuse(http.StatusNotFound) // force-deleted
		check := RequireTerminating(f.d.pod, time.Second)
		assert.NoError(t, check(httptest.NewRequest(http.MethodGet, "/drain", nil)), "a failed read lets the call through")
		sigterm := time.Now()
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, sigterm.Add(2*time.Second), rep.Budget.Kill, "SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
		assert.Empty(t, rep.PodMismatch)
		assert.Contains(t, logs.String(), "before any read found its deletion")
	})
}

// Without the pod's UID (no POD_UID, and no read found the pod) a force
// deletion cannot be told from a name the API server never had: New says so
// at Warn, and the Report too (PodUIDUnknown), not only the failed read.
func TestUnknownUIDIsSaidAtStartAndInTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv"} // no UID: kube.Config.UID empty
		f, logs := pollFixture(t, api, handlerTransport{api}, 2, fixtureOpts{})
		assert.Contains(t, logs.String(), "a force deletion cannot be told", logs.String())
		api.Refuse(http.StatusNotFound)
		rep := f.d.Shutdown(context.Background())
		assert.True(t, rep.PodUIDUnknown)
		assert.NoError(t, rep.Err(), "not a fault of the drain's")
	})
	synctest.Test(t, func(t *testing.T) {
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		var pod *kube.Pod
		f, logs := pollFixture(t, api, handlerTransport{api}, 2, fixtureOpts{edit: func(cfg *Config) {
			pod = podAs(t, api, "", handlerTransport{api}) // no POD_UID
			_, err := pod.Spec(t.Context())                // learned at start
			require.NoError(t, err)
			cfg.Pod = pod
		}})
		assert.NotContains(t, logs.String(), "a force deletion cannot be told", "the read at start found it")
		rep := f.d.Shutdown(context.Background())
		assert.False(t, rep.PodUIDUnknown)
	})
}
