//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of rows 3420 and 3540): a checkpoint the preserve phase abandoned at its
// hard deadline that ends, saving its sandbox, while the worker waits for it at its exit
// (awaitAbandoned), with no later Run of the phase: the sandbox is recorded paused, and
// the next worker restores it, but the Report and the termination message, written before
// that wait, said timed_out and counted it lost. The worker's exit now writes them again
// with the entry of each sandbox a checkpoint of the drain's saved preserved, counted
// once, its Error saying when and why the entry changed. The phases stay as they ran (the
// preserve phase failed in its window, the escalate step timed out): the exit status is 1.
//
//	0          the drain begins; the one checkpoint is held
//	+6.5 s     the hard deadline: the checkpoint abandoned; the Report written, timed_out
//	           the worker holds the directory for the checkpoint; the hold released
//	           the checkpoint ends, the sandbox saved and recorded paused
//	           before: the Report says timed_out, lost 1; after: preserved, lost 0
//	+8 s       SIGKILL due
func TestSandboxAnAbandonedCheckpointSavedAtTheWorkersExitIsPreservedInTheReport(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	cfg.Concurrency = 1
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	w, d, id, ended := drainHeldCheckpoint(t, cfg)
	written := readReport(t, w)
	require.NotNil(t, written.Preserve)
	require.Len(t, written.Preserve.Entries, 1)
	t.Logf("Report at the drain's end: %s %q", written.Preserve.Entries[0].Outcome, written.Preserve.Entries[0].Error)
	require.Equal(t, pause.TimedOut, written.Preserve.Entries[0].Outcome, "the checkpoint was not abandoned at the hard deadline")
	d.release("hold", id) // the checkpoint ends, saving the sandbox
	rep := <-ended
	assert.True(t, w.pausedHere(id), "the checkpoint did not save the sandbox")

	final := readReport(t, w)
	require.NotNil(t, final.Preserve)
	require.Len(t, final.Preserve.Entries, 1, "the sandbox is counted twice")
	e := final.Preserve.Entries[0]
	t.Logf("Report at the worker's exit: %s %q, counts %v, lost %d, err %v", e.Outcome, e.Error, final.Preserve.Counts, final.Lost(), final.Err())
	assert.Equal(t, pause.Preserved, e.Outcome, "the Report says the saved sandbox was lost")
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 1}, final.Preserve.Counts)
	assert.Contains(t, e.Error, "went on and saved it", "the entry does not say why it changed")
	assert.Equal(t, 0, final.Lost())
	assert.Equal(t, 0, rep.Lost(), "serve's Report, Main's exit status, still counts the sandbox lost")
	msg, err := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, err)
	t.Logf("termination message:\n%s", msg)
	assert.NotContains(t, string(msg), id+"(timed_out)", "the termination message still says the sandbox was lost")
	assert.NotContains(t, string(msg), "LOST", "the termination message still counts the sandbox lost")
}

// readReport reads the Report w wrote in its state directory.
func readReport(t *testing.T, w *Worker) *drain.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(w.cfg.StateDir, reportFile))
	require.NoError(t, err)
	var rep drain.Report
	require.NoError(t, json.Unmarshal(data, &rep))
	return &rep
}
