package kube_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "`+testPod+`" not found`)
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
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "`+testPod+`" not found`)
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
