//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
)

// sandboxd as a real process, terminated by the kubelet simulator with a 6 s grace period:
// its preStop (httpGet /drain) waits only until the drain deadline, SIGTERM preserves the
// ten sandboxes four at a time, the device daemon stops cleanly, and the process exits 0
// before SIGKILL, leaving ten paused records and its Report.
func TestKubeletTerminationOfSandboxd(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and a 6 s grace period")
	}
	const grace, n = 6 * time.Second, 10
	dir := t.TempDir()
	addr, hookAddr := freeAddr(t), freeAddr(t)
	const secret = "kubelet-only"
	// With a secret set, the hook requires it even from loopback, as the kubelet sends it.
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", hookAddr, "-state-dir", dir,
		"-grace", grace.String(), "-pause-latency", "300ms", "-concurrency", "4")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", HookSecretEnv+"="+secret)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	child := kubeletsimtest.Start(t, cmd)
	base := "http://" + addr
	waitStarted(t, base, &stderr)
	for range n {
		createSandbox(t, base)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tl, err := kubeletsim.Terminate(ctx, child, kubeletsim.HTTPGet{URL: "http://" + hookAddr + "/drain",
		Header: http.Header{"X-Drain-Secret": {secret}}}, grace)
	require.NoError(t, err)
	t.Logf("timeline:\n%s", tl)
	assert.Equal(t, http.StatusOK, tl.HookStatus, "the hook reached the drain (the kubelet takes a 404 for a hook that returned)")
	assert.False(t, tl.Killed, "sandboxd was SIGKILLed:\n%s\n%s", tl, &stderr)
	assert.NoError(t, child.Err(), "exit status 0")

	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	recs, problems, err := st.Load()
	require.NoError(t, err)
	assert.Len(t, recs, n, "every sandbox paused and recorded")
	assert.Empty(t, problems)
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "device daemon exited on its own: %s", events)
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	assert.Zero(t, rep.Lost())
	assert.Equal(t, "deadline", rep.PreStop.Reason, "the preStop wait ended at the drain deadline")
	assert.Positive(t, rep.Headroom)
}

// waitStarted waits until the sandboxd process at base answers /healthz,
// and fails the test with the process's stderr when it has not in 20 s.
func waitStarted(t *testing.T, base string, stderr fmt.Stringer) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "sandboxd did not start: %s", stderr)
}

func freeAddr(t *testing.T) string {
	addr, err := freeport.Addr()
	require.NoError(t, err)
	return addr
}
