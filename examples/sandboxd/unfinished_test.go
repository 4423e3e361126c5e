package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/freeport"
)

// Fault (row 1510): the drain's account was written only at its end, so a SIGKILL in the
// middle of it (the kubelet's orphan cleanup under a restarted kubelet, an OOM kill) left
// the earlier drain's Report in its place, read as this one's. Now the file is this
// drain's from its start, marked unfinished, and rewritten as it goes:
//
//	an earlier drain's Report in the state directory ("preserved 2", 2026-12-05)
//	sandboxd serving 8 sandboxes, pauses of 1 s, 2 at a time
//	SIGTERM: the drain; its preserve phase pauses 2 at a time
//	2 records of paused sandboxes written: SIGKILL
//	  before: last-shutdown.json the earlier drain's, "preserved 2"
//	  after:  this drain's (its start after the SIGTERM), unfinished, the preserve
//	          phase running, 8 counted
//
// Real process: this test binary, re-executed as sandboxd.
func TestSIGKILLMidDrainLeavesThisDrainsUnfinishedReport(t *testing.T) {
	state := t.TempDir()
	report := filepath.Join(state, server.ReportFile)
	const earlier = "2026-12-05T10:00:00Z"
	require.NoError(t, os.WriteFile(report, []byte(`{"start": "`+earlier+`", "preserve": {"counts": {"preserved": 2}}}`), 0o600))
	addr, err := freeport.Addr()
	require.NoError(t, err)
	hook, err := freeport.Addr()
	require.NoError(t, err)
	p, stderr := startSandboxd(t, "-listen", addr, "-hook-listen", hook, "-state-dir", state,
		"-termination-log", filepath.Join(t.TempDir(), "termination-log"),
		"-grace", "30s", "-pause-latency", "1s", "-concurrency", "2")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "sandboxd serving") }, 30*time.Second,
		10*time.Millisecond, "sandboxd did not start: %s", stderr)
	for range 8 {
		resp, err := http.Post("http://"+addr+"/sandboxes", "application/json", strings.NewReader(`{"timeout_s": 86400}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	sigterm := time.Now()
	require.NoError(t, p.Signal(syscall.SIGTERM))
	records := filepath.Join(state, "records")
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(records)
		n := 0
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".rec") {
				n++
			}
		}
		return n >= 2
	}, 20*time.Second, 5*time.Millisecond, "no sandbox paused: %s", stderr)
	require.NoError(t, p.Kill())
	<-p.Exited()

	data, err := os.ReadFile(report)
	require.NoError(t, err, "this drain's account")
	var rep struct {
		Start      time.Time
		Unfinished *struct {
			At      time.Time
			Phase   string
			Counted int
		}
	}
	t.Logf("%s", data)
	require.NoError(t, json.Unmarshal(data, &rep), "%s", data)
	assert.NotEqual(t, earlier, rep.Start.Format(time.RFC3339), "the earlier drain's Report, taken for this one's: %s", data)
	assert.False(t, rep.Start.Before(sigterm.Add(-time.Second)), "this drain's start: %s", data)
	require.NotNil(t, rep.Unfinished, "the account says the drain did not finish: %s", data)
	assert.Equal(t, "preserve", rep.Unfinished.Phase, "%s", data)
	assert.Equal(t, 8, rep.Unfinished.Counted, "%s", data)
}
