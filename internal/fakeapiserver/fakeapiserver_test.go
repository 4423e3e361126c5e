package fakeapiserver_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/kube"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A kube.Pod made from the returned Config reads the pod from the handler,
// over TLS on loopback, with the token it was given.
func TestConfigReachesTheHandlerWithTheToken(t *testing.T) {
	requests := make(chan string, 10)
	srv, cfg := fakeapiserver.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization")
		fmt.Fprint(w, `{"metadata":{"name":"sandboxd-0","namespace":"agentenv","deletionTimestamp":"2026-11-30T03:30:00Z"}}`)
	}), "agentenv", "token-1")
	assert.Regexp(t, `^https://127\.0\.0\.1:\d+$`, srv.URL)
	assert.Equal(t, srv.URL, cfg.Host)
	assert.Equal(t, "agentenv", cfg.Namespace)

	pod, err := kube.New("sandboxd-0", cfg)
	require.NoError(t, err)
	d, err := pod.Deletion(t.Context())
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC), d.Timestamp.UTC())
	require.Len(t, requests, 1)
	assert.Equal(t, "GET /api/v1/namespaces/agentenv/pods/sandboxd-0 Bearer token-1", <-requests)
}
