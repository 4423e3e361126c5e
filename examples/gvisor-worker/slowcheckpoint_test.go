//go:build linux

package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// Fault (row 1072): a runsc checkpoint still running at the Preserver's hard deadline
// (slower than the phase: a large sandbox, a loaded disk, the node's first drain on the
// -pause-latency estimate) is never cut, and held.Preserve waited for it: the Preserver
// abandoned it, and the Report called it "a preserve that never returned (it ignored its
// context: a hang, not a slow preserve)", to be bounded with Config.Pause.SandboxTimeout,
// which would only give up sooner on what cannot be cut. Nor did the Estimator hear of
// it: the rates saved for the next worker kept the estimate this one planned with, so
// every later drain lost the same sandboxes. Preserve now returns at its context's end,
// the checkpoint running on, marked in flight, and its time so far is observed: the
// Report says the preserves took that many times the estimate, and the next worker starts
// from at least that.
//
//	0       the drain begins: the checkpoint's runsc sleeps (slowRunsc) to 2.5 s past
//	4.5 s   the preserve phase's deadline
//	6.5 s   the Preserver's hard deadline: the checkpoint still runs
func TestCheckpointStillRunningAtTheHardDeadlineIsSlowAndLearned(t *testing.T) {
	w, _, _, _, ended := drainingOne(t, map[string]string{"slow": sleepPast(2500 * time.Millisecond)})
	rep := <-ended

	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	assert.Equal(t, pause.Preserved, e.Outcome, "its checkpoint saved it while the worker waited at its exit (row 3740)")
	assert.Contains(t, e.Error, "timed_out when the preserve phase ended")
	assert.False(t, e.Abandoned(), "before: abandoned as a hang: %s", e.Error)
	assert.Contains(t, e.Error, "its checkpoint still runs (a started checkpoint is never cut), not waited for")
	phase := rep.Phase(drain.PhasePreserve)
	require.NotNil(t, phase)
	assert.NotContains(t, phase.Error, "a hang", "before: SandboxTimeout's advice")
	assert.Contains(t, phase.Error, "times the estimate the plan counted")

	rates, err := learned.Read(filepath.Join(w.cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 1, rates.Observations, "before: none, the estimate the prior")
	assert.Greater(t, rates.Estimate, e.Duration*9/10, "before: %v, -pause-latency's", w.cfg.PauseLatency)
}
