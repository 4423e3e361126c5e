//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/stretchr/testify/require"
)

// Fault (row 1512): the worker wrote its drain's account only at the drain's end, so a
// SIGKILL in its middle (the kubelet's orphan cleanup under a restarted kubelet, an OOM
// kill) left the earlier drain's Report in its place, read as this one's, as sandboxd's
// did (row 1510). Now the file is this drain's from its start, marked unfinished:
//
//	an earlier drain's Report in the state directory ("preserved 4", 2026-12-05)
//	the worker serving 8 sandboxes, fake checkpoints of 1 s, 2 at a time
//	SIGTERM: the drain; 2 checkpoint records written: SIGKILL
//	  before: last-shutdown.json the earlier drain's, "preserved 4"
//	  after:  this drain's (its start after the SIGTERM), unfinished, the preserve
//	          phase running, 8 counted
//
// Real process: this test binary, re-executed as the worker.
func TestSIGKILLMidDrainLeavesTheWorkersUnfinishedReport(t *testing.T) {
	state := t.TempDir()
	report := filepath.Join(state, reportFile)
	const earlier = "2026-12-05T10:00:00Z"
	require.NoError(t, os.WriteFile(report, []byte(`{"start": "`+earlier+`", "preserve": {"counts": {"preserved": 4}}}`), 0o600))
	sock := filepath.Join(state, "w.sock")
	p, stderr := startWorkerMain(t, "-state-dir", state, "-socket", sock, "-termination-log", filepath.Join(t.TempDir(), "termination-log"),
		"-grace", "30s", "-pause-latency", "1s", "-concurrency", "2")
	waitSocket(t, sock, stderr)
	c := dial(t, sock)
	for range 8 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
	}
	records, err := store.Open(filepath.Join(state, "records"))
	require.NoError(t, err)
	lastreporttest.KilledMidPreserve(t, p, stderr, report, earlier, 8, func() bool { recs, _, _ := records.Load(); return len(recs) >= 2 })
}
