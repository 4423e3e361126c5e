package naiveserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The test binary becomes the server when run as "TESTBIN naiveserver ARGS".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "naiveserver" {
		os.Exit(Main(os.Args[2:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, state string, args ...string) (*Client, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(os.Args[0], append([]string{"naiveserver", "-listen", addr, "-state", state}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := NewClient("http://" + addr)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.Wait(ctx))
	return c, cmd
}

func TestSIGTERMPausesOneAtATimeAndPausedSandboxesSurviveARestart(t *testing.T) {
	state := t.TempDir()
	const pause = 100 * time.Millisecond
	c, cmd := start(t, state, "-pause", pause.String())
	ctx := t.Context()
	for range 3 {
		_, err := c.Create(ctx)
		require.NoError(t, err)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "exits 0 once its naive shutdown is done")

	recs, err := LoadRecords(state)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	for i := 1; i < len(recs); i++ {
		assert.GreaterOrEqual(t, recs[i].PausedAt.Sub(recs[i-1].PausedAt), pause, "one at a time")
	}

	c2, _ := start(t, state)
	states, err := c2.States(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"sb-1": Paused, "sb-2": Paused, "sb-3": Paused}, states)
}

func TestPreStopWaitsWhileAnySandboxRuns(t *testing.T) {
	c, _ := start(t, t.TempDir(), "-pause", "1ms")
	ctx := t.Context()
	id, err := c.Create(ctx)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var into struct{}
	err = c.do(short, http.MethodGet, "/prestop", http.StatusOK, &into)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "still waiting: %v", err)

	assert.Equal(t, http.StatusNoContent, status(t, c, http.MethodPost, "/sandboxes/"+id+"/pause"))
	assert.Equal(t, http.StatusOK, status(t, c, http.MethodGet, "/prestop"), "returns once nothing runs")
}

// status sends one request and returns the answer's status.
func status(t *testing.T, c *Client, method, path string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.Base+path, nil)
	require.NoError(t, err)
	resp, err := c.http.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestPauseAnswers(t *testing.T) {
	c, _ := start(t, t.TempDir(), "-pause", "1ms")
	ctx := t.Context()
	id, err := c.Create(ctx)
	require.NoError(t, err)
	post := func(path string) int { return status(t, c, http.MethodPost, path) }
	assert.Equal(t, http.StatusNoContent, post("/sandboxes/"+id+"/pause"))
	assert.Equal(t, http.StatusConflict, post("/sandboxes/"+id+"/pause"))
	assert.Equal(t, http.StatusNotFound, post("/sandboxes/nope/pause"))
	assert.Equal(t, http.StatusNoContent, post("/sandboxes/"+id+"/resume"))
	assert.Equal(t, http.StatusNoContent, post("/sandboxes/"+id+"/pause"))
}
