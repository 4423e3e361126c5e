//go:build linux

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
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
	records, err := store.Open(filepath.Join(state, "records"))
	require.NoError(t, err)
	lastreporttest.KilledMidPreserve(t, p, stderr, report, earlier, 8, func() bool { recs, _, _ := records.Load(); return len(recs) >= 2 })
}
