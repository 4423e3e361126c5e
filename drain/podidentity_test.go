package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/logbuf"
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

				rep := shutdownKeepsTheGrace(t, f, logs)
				assert.Contains(t, rep.PodMismatch, c.uid)
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), c.uid)
				assert.Regexp(t, `msg="drain: SIGTERM: plan" .*pod_mismatch=`, logs.String(), "the plan says it")
			})
		})
	}
}

// shutdownKeepsTheGrace drains pollFixture's 10 sandboxes of 1 s from a
// SIGTERM now, with no hook, and checks that nothing was taken for a force
// deletion: SIGKILL stays at SIGTERM + the fixture's 20 s and all 10 are
// preserved. It returns the Report.
func shutdownKeepsTheGrace(t *testing.T, f *fixture, logs *logbuf.Buffer) *Report {
	t.Helper()
	sigterm := time.Now()
	rep := f.d.Shutdown(context.Background())
	assert.Equal(t, sigterm.Add(20*time.Second), rep.Budget.Kill, "the grace stands: SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
	assert.Equal(t, 10, rep.Preserve.Counts["preserved"], "%v", rep.Preserve.Counts)
	assert.NotContains(t, logs.String(), "before any read found its deletion", "no force deletion")
	return rep
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

// Fault (row 710): a static pod's POD_UID, from the Downward API, is the
// kubelet's UID for it, its config hash; the API server holds a mirror pod
// of the same name under a UID of its own, the hash in its
// kubernetes.io/config.mirror annotation (measured under the real kubelet
// v1.34.4, docs/real-kubelet.md). Every read found "another UID under the
// name": read at start, the drain said pod_mismatch at Error, in the
// Report and its Err (a non-zero exit) on every drain; read first at the
// drain, row 580 took it for a force deletion and planned SIGKILL 2 s
// after SIGTERM (1 of 10 preserved). The mirror pod whose annotation is
// POD_UID is the pod:
//
//	0 s   start: the mirror pod read once (or not), POD_UID its annotation
//	      SIGTERM, no hook, the pod not deleted (the kubelet stops a static
//	      pod on its own): SIGKILL stays at SIGTERM + 20 s, 10 preserved
func TestStaticPodsMirrorPodIsThePod(t *testing.T) {
	for _, readAtStart := range []bool{true, false} {
		t.Run(map[bool]string{true: "read at start", false: "read first at the drain"}[readAtStart], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := mirrorPod(staticHash)
				f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{edit: func(cfg *Config) {
					cfg.Pod = podAs(t, api, staticHash, handlerTransport{api})
					if readAtStart {
						_, err := cfg.Pod.Spec(t.Context())
						require.NoError(t, err)
					}
				}})
				rep := shutdownKeepsTheGrace(t, f, logs)
				assert.Empty(t, rep.PodMismatch)
				assert.NoError(t, rep.Err())
				assert.NotContains(t, logs.String(), "level=ERROR")
				assert.Equal(t, 1, strings.Count(logs.String(), "the kubelet stops it when its manifest is removed"), "said once: %s", logs.String())
				assert.True(t, rep.StaticPod)
			})
		})
	}
}

// Fault (row 840): a static pod's process can start before the kubelet
// made its mirror pod in the API server (the kubelet starts a static pod's
// containers whether it could make the mirror pod or not: at the node's
// boot, before it reached the API server or registered its node), so the
// read at start finds no pod of the name, a 404. Row 700 took that for a
// POD_NAME or POD_UID that is not the pod's and said so at Error at New,
// though the read at the drain found the pod through its mirror: a false
// Error line at every such start. A 404 at start for a POD_UID that is a
// static pod's (the kubelet's config hash) is now said once at Info; a pod
// still not found at the drain is the error it was:
//
//	0 s   start: the read finds no pod of the name (404), POD_UID staticHash
//	1 s   the kubelet makes the mirror pod, or not
//	      SIGTERM, no hook: the mirror pod read, SIGKILL stays at SIGTERM +
//	      20 s, no Error (before: the Error at New); no mirror pod: the
//	      Error at the drain's read, pod_mismatch in the Report and its Err
func TestStaticPodReadBeforeItsMirrorPodIsMadeIsNoError(t *testing.T) {
	for _, made := range []bool{true, false} {
		t.Run(map[bool]string{true: "the mirror pod made after the read", false: "no mirror pod by the drain"}[made], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := mirrorPod(staticHash)
				api.Refuse(http.StatusNotFound) // not made yet
				f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{edit: func(cfg *Config) {
					cfg.Pod = podAs(t, api, staticHash, handlerTransport{api})
					_, err := cfg.Pod.Spec(t.Context()) // the read at start
					require.True(t, kube.IsNotFound(err), "%v", err)
				}})
				assert.NotContains(t, logs.String(), "level=ERROR", "start: %s", logs.String())
				assert.Equal(t, 1, strings.Count(logs.String(), `level=INFO msg="drain: the pod is not in the API server yet`), "said once: %s", logs.String())

				time.Sleep(time.Second)
				if made {
					api.Refuse(0)
				}
				rep := shutdownKeepsTheGrace(t, f, logs)
				assert.NotRegexp(t, `msg="drain: SIGTERM: plan" .*pod_mismatch=`, logs.String(), "the read at SIGTERM decides")
				if made {
					assert.NotContains(t, logs.String(), "level=ERROR")
					assert.Empty(t, rep.PodMismatch)
					assert.NoError(t, rep.Err())
					assert.True(t, rep.StaticPod)
					return
				}
				assert.Equal(t, 1, strings.Count(logs.String(), `level=ERROR msg="drain: the pod is still not in the API server at the drain`), "said once: %s", logs.String())
				assert.Contains(t, rep.PodMismatch, staticHash)
				require.Error(t, rep.Err())
				assert.Contains(t, rep.Err().Error(), EnvPodName)
			})
		})
	}
}

// Fault (row 845): a static pod whose FIRST read of the pod is the
// drain's (a library user who reads nothing at start, or whose read at start
// failed) and finds no pod of the name (its mirror pod not made yet, or
// deleted and not made again) had SIGKILL planned 2 s after SIGTERM: row
// 580 took the 404 for a force deletion, which the API server cannot do to
// a static pod (row 720: the kubelet stops it when its manifest is removed,
// with the manifest's grace from SIGTERM). With POD_UID a config hash, such
// a 404 is now a read that could not find the pod, the budget standing:
//
//	0 s   start: no read, or one the API server failed (503)
//	      SIGTERM (the manifest removed), no hook: the read finds no pod of
//	      the name (404) while the drain preserves 10 sandboxes of 1 s;
//	      SIGKILL stays at SIGTERM + 20 s, 10 preserved (before: planned at
//	      + 2 s, 1 of 10 preserved), one Warn line, static_pod in the
//	      Report, no error; the mirror pod made at 3 s (the poll reads it:
//	      one Info line, the static pod's), or never
func TestStaticPodsFirstReadAtTheDrainFindingNoPodIsNoForceDeletion(t *testing.T) {
	for _, c := range []struct {
		name  string
		start int  // the read at start: 0 none, else the API server's status
		made  bool // the kubelet makes the mirror pod during the drain
	}{
		{"no read at start, no mirror pod", 0, false},
		{"no read at start, the mirror pod made during the drain", 0, true},
		{"the read at start failed, no mirror pod", http.StatusServiceUnavailable, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				api := mirrorPod(staticHash)
				f, logs := pollFixture(t, api, handlerTransport{api}, 10, fixtureOpts{edit: func(cfg *Config) {
					cfg.Pod = podAs(t, api, staticHash, handlerTransport{api})
					if c.start != 0 {
						api.Refuse(c.start)
						_, err := cfg.Pod.Spec(t.Context())
						require.Error(t, err)
					}
				}})
				api.Refuse(http.StatusNotFound) // no mirror pod
				if c.made {
					go func() {
						time.Sleep(3 * time.Second)
						api.Refuse(0)
					}()
				}
				rep := shutdownKeepsTheGrace(t, f, logs)
				assert.True(t, rep.StaticPod, "the Report says the pod is a static pod")
				assert.Empty(t, rep.PodMismatch, "no read before the termination found the name naming no pod")
				assert.NoError(t, rep.Err())
				assert.NotContains(t, logs.String(), "level=ERROR")
				assert.Equal(t, 1, strings.Count(logs.String(), `level=WARN msg="drain: the pod could not be found in the API server`), "said once: %s", logs.String())
				if c.made {
					assert.Equal(t, 1, strings.Count(logs.String(), "the kubelet stops it when its manifest is removed"), "the mirror pod read: %s", logs.String())
				}
			})
		})
	}
}

// A mirror pod of another static pod in the name (another hash) is another
// pod, as any other UID: after a read that found this pod's mirror, SIGKILL
// is planned 2 s after SIGTERM. That costs no time the kubelet gives: no
// kubelet shows it to this pod while it terminates it with its grace. A
// replaced manifest is a new config hash, so a new UID, and the kubelet
// v1.34.4 removes the old pod (config.go's SET, REMOVE before ADD;
// HandlePodRemoves, deletePod: SyncPodKill) with its own spec's grace
// (calculateEffectiveGracePeriod: a file's pod has no deletion grace),
// holds the new pod until the old one is terminated (allowStaticPodStart,
// then its back-off) and replaces the mirror only in the new pod's SyncPod
// (tryReconcileMirrorPods). Measured once under the real kubelet and API
// server (TestRealKubeletWithAPIServer/static_pod with the manifest
// replaced, not removed; not in CI): the old pod stopped with
// gracePeriod=10, sandboxd's plan +10.03 s, 4 of 4 preserved, exit +4.2 s,
// the old hash's mirror until +10.9 s (+13.5 s in another run). Only a
// restarted kubelet makes the new mirror while the old pod runs (at its
// start, fastStaticPodsRegistration, and the new pod's SyncPod, which
// nothing holds then), and it stops the old pod as an orphan's, with a
// grace of 1 s raised to its 2 s (HandlePodCleanups), as row 397 plans.
func TestAnotherStaticPodsMirrorPodIsAnotherPod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		this, other := mirrorPod(staticHash), mirrorPod("0a1b2c3d4e5f60718293a4b5c6d7e8f9")
		f, logs, api := staticFixture(t, this)
		api.Store(other)
		sigterm := time.Now()
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, sigterm.Add(2*time.Second), rep.Budget.Kill, "SIGTERM+%v", rep.Budget.Kill.Sub(sigterm))
		assert.Empty(t, rep.PodMismatch)
		assert.True(t, rep.StaticPod)
		// Fault (row 848): the line said "removed from the API server before
		// any read found its deletion (a force deletion ...)", which sends
		// the operator after a kubectl delete --force nobody ran: the API
		// server cannot force-delete a static pod.
		assert.NotContains(t, logs.String(), "force deletion", "a static pod is never force-deleted: %s", logs.String())
		line := regexp.MustCompile(`level=WARN msg="drain: another static pod's mirror pod is under this pod's name[^\n]*`).FindAllString(logs.String(), -1)
		require.Len(t, line, 1, "said once: %s", logs.String())
		for _, says := range []string{
			"manifest was replaced", "kubelet that restarted", "stops this pod as an orphan's", "2 s after T0", "cannot force-delete a static pod",
			"a mirror pod of the static pod 0a1b2c3d4e5f60718293a4b5c6d7e8f9", "at=SIGTERM",
		} {
			assert.Contains(t, line[0], says)
		}
		assert.NotContains(t, line[0], "deleted and created again", "kube's error says what the read found, not a deletion")
	})
}

// staticFixture is pollFixture's drain of 10 sandboxes in the static pod
// staticHash, read at start through its mirror pod mirror, whose API
// server serves the pod that api holds (mirror, until a test stores
// another: the kubelet's new mirror pod, another static pod's).
func staticFixture(t *testing.T, mirror *fakeapiserver.Pod) (*fixture, *logbuf.Buffer, *atomic.Pointer[fakeapiserver.Pod]) {
	t.Helper()
	var api atomic.Pointer[fakeapiserver.Pod]
	api.Store(mirror)
	rt := handlerTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { api.Load().ServeHTTP(w, r) })}
	f, logs := pollFixture(t, mirror, rt, 10, fixtureOpts{edit: func(cfg *Config) {
		cfg.Pod = podAs(t, mirror, staticHash, rt)
		_, err := cfg.Pod.Spec(t.Context())
		require.NoError(t, err)
	}})
	return f, logs, &api
}

// staticHash is a static pod's UID as the kubelet makes it (its config
// hash): the POD_UID its Downward API gives.
const staticHash = "6f1e2b9a8c7d4e3f2a1b0c9d8e7f6a5b"

// mirrorPod is the API server's mirror pod sandboxd-0 of the static pod
// whose UID is hash, with the UID the API server gave it and the
// annotations the kubelet's CreateMirrorPod copies and adds.
func mirrorPod(hash string) *fakeapiserver.Pod {
	return &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "3c1a5e7b-0000-4000-8000-0000000000" + hash[:2],
		Annotations: map[string]string{corev1.MirrorPodAnnotationKey: hash, "kubernetes.io/config.hash": hash, "kubernetes.io/config.source": "file"}}
}

// Fault (row 720): deleting a static pod's mirror pod does not stop the
// static pod: the kubelet deletes the mirror and makes a new one (a mirror
// pod "cannot be controlled" from the API server; the kubelet v1.34's
// syncPod). The kubelet stops a static pod only when its manifest is
// removed, with the manifest's grace from SIGTERM, and no deletion of it
// shows in the API server. Yet a drain took the mirror's deletion for the
// pod's: a `kubectl delete pod --grace-period=1` of the mirror planned
// SIGKILL at its deletionTimestamp, a `--force` of it (a 404) row 580's 2 s
// after SIGTERM, though the kubelet gives the 20 s:
//
//	0 s    start: the mirror pod read, POD_UID its annotation (a static pod)
//	       SIGTERM (the manifest removed), no hook: 10 preserves of 1 s
//	1.5 s  the mirror pod deleted with a grace of 1 s, or force-deleted
//	       (404; made again by the kubelet at 3.5 s, another API UID)
//	       SIGKILL stays at SIGTERM + 20 s, 10 preserved (before: planned at
//	       + 2 s by the poll at 2 s, 2 of 10 preserved, each way)
func TestStaticPodsMirrorDeletionIsNotThePods(t *testing.T) {
	for _, c := range []struct {
		name   string
		delete func(mirror *fakeapiserver.Pod, api *atomic.Pointer[fakeapiserver.Pod])
	}{
		{"mirror deleted with --grace-period=1", func(mirror *fakeapiserver.Pod, _ *atomic.Pointer[fakeapiserver.Pod]) {
			mirror.Delete(time.Now(), time.Second)
		}},
		{"mirror force-deleted", func(mirror *fakeapiserver.Pod, _ *atomic.Pointer[fakeapiserver.Pod]) {
			mirror.Refuse(http.StatusNotFound)
		}},
		{"mirror force-deleted and made again", func(mirror *fakeapiserver.Pod, api *atomic.Pointer[fakeapiserver.Pod]) {
			mirror.Refuse(http.StatusNotFound)
			time.Sleep(2 * time.Second)
			again := mirrorPod(staticHash)
			again.UID = "3c1a5e7b-0000-4000-8000-0000000000ff" // a new API UID, the same annotation
			api.Store(again)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mirror := mirrorPod(staticHash)
				f, logs, api := staticFixture(t, mirror)
				go func() {
					time.Sleep(1500 * time.Millisecond)
					c.delete(mirror, api)
				}()
				rep := shutdownKeepsTheGrace(t, f, logs)
				assert.True(t, rep.StaticPod, "the Report says the pod is a static pod")
				assert.NoError(t, rep.Err())
				assert.Regexp(t, `msg="drain: SIGTERM: plan" .*static_pod=`, logs.String(), "the plan says it")
				assert.Equal(t, 1, strings.Count(logs.String(), "the kubelet stops it when its manifest is removed"), "said once: %s", logs.String())
			})
		})
	}
}
