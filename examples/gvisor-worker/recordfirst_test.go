//go:build linux

package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of the worker's drain on real runsc): a checkpoint runsc answered as
// made, its image written, was recorded only once its container was seen stopped:
// runsc.Runtime.Checkpoint waits for that, up to StopWait (10 s), so that a caller asking
// runsc state right after is not told "running" (row 1670), and the examples' Runsc.Pause
// gives it no context that ends (a checkpoint is never cut), so the wait ran whatever the
// drain's deadline, the record after it. A stop not seen (a sandbox process slow to end
// under a CPU limit, 0.4-0.8 s at 1 %; a runsc state slow under load; here held unseen)
// left a sandbox saved at the drain's start unrecorded past the Preserver's hard
// deadline: the Report said "its checkpoint still runs", timed out, where SIGKILL would
// have found an image and no record, the sandbox lost with its state on disk. Pause now
// records once the image is written: preserved, recorded, at once.
//
//	drain starts (grace 8 s: preserve deadline +4.5 s, hard +6.5 s)
//	checkpoint: runsc answers, the image written; its container's stop not seen
//	before: Pause waits for the stop (10 s); the Preserver gives up at +6.5 s: timed out
//	after: recorded at once; preserved
func TestSandboxSavedIsRecordedWithoutWaitingToSeeItStop(t *testing.T) {
	w, d, id, _, ended := drainingOne(t, map[string]string{"staysrunning": ""})
	rep := <-ended
	d.calls(rep.Start)

	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	t.Logf("%s: %s after %d attempts, at +%v: %s", e.ID, e.Outcome, e.Attempts, e.End.Sub(rep.Start), e.Error)
	assert.Equal(t, pause.Preserved, e.Outcome, "before: timed out, its image written, its record waiting for the stop")
	st, err := store.Open(filepath.Join(w.cfg.StateDir, "records"))
	require.NoError(t, err)
	recs, _, err := st.Load()
	require.NoError(t, err)
	require.Len(t, recs, 1, "the record, by the drain's end")
	assert.Equal(t, id, recs[0].ID)
	assert.FileExists(t, filepath.Join(w.rt.(*sandbox.Runsc).Image(id), "checkpoint.img"))
	d.release("staysrunning", id)
}
