package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
)

// The device daemon dies once the drain has begun (the kubelet's preStop call, its
// wait under way): the ERROR line says the drain goes on, where it said "not ready from
// now (/readyz 503); the sandboxes run on until the drain", a drain already running and
// /readyz 503 since the preStop call.
func TestADeviceDaemonThatDiesDuringTheDrainIsSaidSo(t *testing.T) {
	cfg := testConfig(t)
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()
	base := "http://" + s.Addr()
	createSandbox(t, base)
	rec := httptest.NewRecorder()
	s.Drainer().PreStop().ServeHTTP(rec, httptest.NewRequest("GET", "/drain?wait=0s", nil)) // T0; the wait goes on
	require.Equal(t, http.StatusOK, rec.Code)
	code, _, _ := call(t, "GET", base+"/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, code, "not ready since the preStop call")

	require.NoError(t, syscall.Kill(s.daemon.Pid(), syscall.SIGKILL))
	<-s.daemon.Done()
	assert.Eventually(t, func() bool { // a bound on the failure: the watcher's goroutine, not a timing assertion
		return strings.Contains(logs.String(), `level=ERROR msg="sandboxd: the device daemon ended (signal: killed)`)
	}, 5*time.Second, 10*time.Millisecond)
	assert.NotContains(t, logs.String(), "until the drain", "the drain runs")
	assert.NotContains(t, logs.String(), "not ready from now", "not ready since the preStop call")
	assert.Contains(t, logs.String(), "the drain under way goes on")
	cancel() // SIGTERM
	<-done
}
