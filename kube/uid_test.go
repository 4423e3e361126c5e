package kube_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
