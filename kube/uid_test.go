package kube_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

// UID is Config.UID, else what the first read found; a read that finds no
// pod (404) teaches it nothing. drain takes a 404 for the pod's removal (a
// force deletion) only when it is known.
func TestUIDIsConfiguredOrLearnedFromARead(t *testing.T) {
	t.Run("from Config.UID", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, nil))
		cfg.UID = "8d3c2f1e-0000-4000-8000-000000000001"
		assert.Equal(t, cfg.UID, newPod(t, cfg, testPod).UID())
	})
	t.Run("learned from the first read", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, nil))
		p := newPod(t, cfg, testPod)
		assert.Empty(t, p.UID(), "nothing read yet")
		_, err := p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrNotTerminating)
		assert.Equal(t, "8d3c2f1e-0000-4000-8000-000000000001", p.UID())
	})
	t.Run("not from a 404", func(t *testing.T) {
		_, cfg := newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
			fakeapiserver.PodNotFound(w, testPod)
		})
		p := newPod(t, cfg, testPod)
		_, err := p.Deletion(t.Context())
		require.Error(t, err)
		assert.Empty(t, p.UID())
	})
	t.Run("not made by New", func(t *testing.T) {
		var p *kube.Pod
		assert.Empty(t, p.UID())
	})
}

// Identity says whether a read found the pod of this name with the UID
// (Confirmed), and the first read that, none confirmed, found another UID
// under the name or no pod (Mismatch): read while the pod runs, a
// POD_NAME or POD_UID that is not this pod's, which drain must not take
// for a force deletion (row 700). A confirmed pod replaced later is
// ErrPodReplaced with no Mismatch.
func TestIdentitySaysWhetherTheNameNamesThisPod(t *testing.T) {
	const uid = "8d3c2f1e-0000-4000-8000-000000000001" // podJSON's
	t.Run("confirmed by a read", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, nil))
		cfg.UID = uid
		p := newPod(t, cfg, testPod)
		assert.Equal(t, kube.Identity{UID: uid, Configured: true}, p.Identity(), "nothing read yet")
		_, err := p.Spec(t.Context())
		require.NoError(t, err)
		assert.Equal(t, kube.Identity{UID: uid, Configured: true, Confirmed: true}, p.Identity())
	})
	t.Run("another UID under the name", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, nil))
		cfg.UID = "uid-of-the-manifest"
		p := newPod(t, cfg, testPod)
		_, err := p.Spec(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		id := p.Identity()
		require.ErrorIs(t, id.Mismatch, kube.ErrPodReplaced)
		assert.Contains(t, id.Mismatch.Error(), "Config.UID is uid-of-the-manifest, which no read found under this name")
		assert.Contains(t, id.Mismatch.Error(), uid)
		assert.False(t, id.Confirmed)
		_, err = p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		assert.Equal(t, id, p.Identity(), "the first read's")
	})
	t.Run("no pod of the name", func(t *testing.T) {
		_, cfg := newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
			fakeapiserver.PodNotFound(w, testPod)
		})
		cfg.UID = uid
		p := newPod(t, cfg, testPod)
		_, err := p.Deletion(t.Context())
		require.Error(t, err)
		var apiErr *kube.APIError
		require.ErrorAs(t, p.Identity().Mismatch, &apiErr)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
		assert.Contains(t, p.Identity().Mismatch.Error(), "no pod of this name")
	})
	t.Run("replaced after a read found it", func(t *testing.T) {
		var replaced atomic.Bool
		first, second := podJSON(t, nil), podJSON(t, func(p *corev1.Pod) { p.UID = "uid-of-the-new-pod" })
		_, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
			if replaced.Load() {
				second(w, r)
				return
			}
			first(w, r)
		})
		p := newPod(t, cfg, testPod)
		_, err := p.Spec(t.Context())
		require.NoError(t, err)
		replaced.Store(true)
		_, err = p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		id := p.Identity()
		assert.True(t, id.Confirmed)
		assert.NoError(t, id.Mismatch, "a replacement, not a misnamed pod")
		assert.False(t, id.Configured)
	})
	t.Run("not made by New", func(t *testing.T) {
		var p *kube.Pod
		assert.Equal(t, kube.Identity{}, p.Identity())
	})
}

// A static pod's metadata.uid, through the Downward API, is the kubelet's:
// its config hash, which the API server's mirror pod of the same name
// carries in its kubernetes.io/config.mirror annotation under a UID of its
// own (measured under the real kubelet v1.34.4, docs/real-kubelet.md).
// That mirror pod is this pod: before, every read was ErrPodReplaced and
// Identity a Mismatch, which drain reports as a misconfigured POD_UID
// (row 710). A mirror pod of another static pod in the name (another
// hash) is still another pod.
func TestMirrorPodOfAStaticPodIsThePod(t *testing.T) {
	const (
		hash      = "6f1e2b9a8c7d4e3f2a1b0c9d8e7f6a5b" // the static pod's UID, POD_UID
		mirrorUID = "8d3c2f1e-0000-4000-8000-000000000001"
	)
	mirror := func(of string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.UID = mirrorUID
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: of, "kubernetes.io/config.hash": of, "kubernetes.io/config.source": "file"}
		}
	}
	t.Run("this static pod's mirror", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, mirror(hash)))
		cfg.UID = hash
		p := newPod(t, cfg, testPod)
		_, err := p.Spec(t.Context())
		require.NoError(t, err)
		_, err = p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrNotTerminating, "read as this pod's")
		assert.Equal(t, kube.Identity{UID: hash, Configured: true, Confirmed: true, Static: true}, p.Identity())
	})
	t.Run("another static pod's mirror", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, mirror("0a1b2c3d4e5f60718293a4b5c6d7e8f9")))
		cfg.UID = hash
		p := newPod(t, cfg, testPod)
		_, err := p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
		assert.Contains(t, err.Error(), "mirror pod of the static pod 0a1b2c3d4e5f60718293a4b5c6d7e8f9")
		assert.ErrorIs(t, p.Identity().Mismatch, kube.ErrPodReplaced)
	})
	t.Run("the annotation is no UID of a pod that is not a mirror", func(t *testing.T) {
		_, cfg := newAPIServer(t, podJSON(t, func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.hash": hash}
		}))
		cfg.UID = hash
		p := newPod(t, cfg, testPod)
		_, err := p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrPodReplaced)
	})
}

// The kubelet starts a static pod whether it could make its mirror pod in
// the API server or not, and makes it later: a read at start can find no
// pod of the name though POD_NAME and POD_UID are right. With Config.UID a
// static pod's (its config hash), such a 404 is MirrorPending, which drain
// says at Info, not as a misconfigured pod (row 840); the mirror pod read
// later confirms the pod. A 404 for a UID of the API server's, or another
// pod under the name, is a Mismatch as before.
func TestMirrorPendingIsAStaticPodsReadBeforeItsMirrorPod(t *testing.T) {
	const (
		hash      = "6f1e2b9a8c7d4e3f2a1b0c9d8e7f6a5b" // the static pod's UID, POD_UID
		mirrorUID = "8d3c2f1e-0000-4000-8000-000000000001"
	)
	notFound := func(w http.ResponseWriter, _ *http.Request) {
		fakeapiserver.PodNotFound(w, testPod)
	}
	t.Run("a static pod's, then its mirror pod made", func(t *testing.T) {
		var made atomic.Bool
		mirror := podJSON(t, func(p *corev1.Pod) {
			p.UID, p.Annotations = mirrorUID, map[string]string{corev1.MirrorPodAnnotationKey: hash}
		})
		_, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
			if made.Load() {
				mirror(w, r)
				return
			}
			notFound(w, r)
		})
		cfg.UID = hash
		p := newPod(t, cfg, testPod)
		_, err := p.Spec(t.Context())
		require.True(t, kube.IsNotFound(err), "%v", err)
		id := p.Identity()
		assert.True(t, kube.IsNotFound(id.Mismatch), "%v", id.Mismatch)
		assert.True(t, id.MirrorPending())

		made.Store(true)
		_, err = p.Deletion(t.Context())
		require.ErrorIs(t, err, kube.ErrStaticPod)
		id = p.Identity()
		assert.True(t, id.Confirmed && id.Static, "%+v", id)
		assert.False(t, id.MirrorPending(), "the mirror pod read")
	})
	for _, c := range []struct {
		name  string
		uid   string
		serve http.HandlerFunc
	}{
		{"a 404 for a UID of the API server's", mirrorUID, notFound},
		{"a 404 for a static pod's UID in capitals", strings.ToUpper(hash), notFound},
		{"another pod under the name", hash, podJSON(t, nil)},
		{"no Config.UID", "", notFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, cfg := newAPIServer(t, c.serve)
			cfg.UID = c.uid
			p := newPod(t, cfg, testPod)
			_, err := p.Spec(t.Context())
			require.Error(t, err)
			assert.Error(t, p.Identity().Mismatch)
			assert.False(t, p.Identity().MirrorPending())
		})
	}
	assert.False(t, kube.Identity{}.MirrorPending(), "nothing read")
}

// Deleting a static pod's mirror pod does not stop the static pod: the
// kubelet deletes the mirror and makes a new one; it stops the static pod
// only when its manifest is removed, with the manifest's grace. Before, a
// read of the mirror pod deleted with --grace-period=1 returned its
// deletionTimestamp as this pod's SIGKILL, and the 404 after a force
// deletion of it read as this pod's removal (row 720). Now each, and a new
// mirror pod of another API UID with the same annotation, is ErrStaticPod
// (ErrNotTerminating), with the spec's grace when the mirror was read;
// with no Config.UID, the first read learns the annotation's UID.
func TestMirrorPodsDeletionIsNotTheStaticPods(t *testing.T) {
	const hash = "6f1e2b9a8c7d4e3f2a1b0c9d8e7f6a5b"
	var state atomic.Int32 // 0 the mirror; 1 deleted with 1 s; 2 gone (404); 3 made again
	mirror := func(uid string, deleted bool) http.HandlerFunc {
		return podJSON(t, func(p *corev1.Pod) {
			p.UID = types.UID("8d3c2f1e-0000-4000-8000-0000000000" + uid)
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: hash}
			if deleted {
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now().Add(time.Second)}, new(int64(1))
			}
		})
	}
	first, deleted, again := mirror("01", false), mirror("01", true), mirror("02", false)
	for _, uid := range []string{hash, ""} {
		t.Run("Config.UID "+map[bool]string{true: "the hash", false: "empty"}[uid != ""], func(t *testing.T) {
			state.Store(0)
			_, cfg := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
				switch state.Load() {
				case 0:
					first(w, r)
				case 1:
					deleted(w, r)
				case 2:
					fakeapiserver.PodNotFound(w, "sandboxd-0")
				default:
					again(w, r)
				}
			})
			cfg.UID = uid
			p := newPod(t, cfg, testPod)
			for s, found := range []string{"no deletionTimestamp", "the deletionTimestamp", "404 Not Found", "no deletionTimestamp"} {
				state.Store(int32(s))
				d, err := p.Deletion(t.Context())
				require.ErrorIs(t, err, kube.ErrStaticPod, "state %d", s)
				require.ErrorIs(t, err, kube.ErrNotTerminating)
				assert.Contains(t, err.Error(), found)
				assert.Zero(t, d.Timestamp, "no SIGKILL read from the mirror pod")
				if s != 2 {
					assert.Equal(t, time.Hour, d.SpecGrace, "the manifest's grace, read from its mirror")
				}
			}
			assert.Equal(t, kube.Identity{UID: hash, Configured: uid != "", Confirmed: true, Static: true}, p.Identity())
		})
	}
}
