package fakeapiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A kube.Pod made from the returned Config reads the pod from the handler,
// over TLS on loopback, with the token it was given.
func TestConfigReachesTheHandlerWithTheToken(t *testing.T) {
	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	var mu sync.Mutex
	var got []string
	srv, cfg := fakeapiserver.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: "sandboxd-0", Namespace: "agentenv", DeletionTimestamp: &metav1.Time{Time: kill}}})
	}), "agentenv", "token-1")
	assert.True(t, strings.HasPrefix(srv.URL, "https://127.0.0.1:"), srv.URL)
	assert.Equal(t, srv.URL, cfg.Host)
	assert.Equal(t, "agentenv", cfg.Namespace)

	pod, err := kube.New("sandboxd-0", cfg)
	require.NoError(t, err)
	d, err := pod.Deletion(t.Context())
	require.NoError(t, err)
	assert.True(t, kill.Equal(d.Timestamp), "got %v", d.Timestamp)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"GET /api/v1/namespaces/agentenv/pods/sandboxd-0 Bearer token-1"}, got)
}
