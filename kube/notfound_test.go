package kube_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

// Fault: every 404 was the pod's removal (IsNotFound), which drain takes
// for a force deletion and plans SIGKILL 2 s after SIGTERM by. The API
// server answers a GET of a pod it does not have with a Status that names
// the pod (details kind "pods", measured on kube-apiserver v1.34.4); a 404
// that names none is another thing: a proxy in front that does not know
// the route (its own page), or the API server's own answer to a path it
// does not serve (a Config.Host with a wrong path prefix: "404 page not
// found"; a wrong resource or version: a Status with empty details). Such
// a read now failed, and says so; it is not the pod's removal, nor a name
// that is not the pod's.
func TestA404ThatNamesNoPodIsNotThePodsRemoval(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   http.HandlerFunc
		removed bool
	}{
		{"a proxy's page", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, false},
		{"the API server's, for a path it does not serve", func(w http.ResponseWriter, _ *http.Request) {
			writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		}, false},
		{"the API server's, for the pod", func(w http.ResponseWriter, _ *http.Request) {
			fakeapiserver.PodNotFound(w, testPod)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, cfg := newAPIServer(t, tc.serve)
			p := newPod(t, cfg, testPod)
			_, err := p.Deletion(t.Context())
			var apiErr *kube.APIError
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
			assert.Equal(t, tc.removed, kube.IsNotFound(err), "the pod's removal: %v", err)
			assert.Equal(t, tc.removed, p.Identity().Mismatch != nil, "no pod of this name: %v", p.Identity().Mismatch)
		})
	}
}
