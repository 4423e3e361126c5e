//go:build linux

package main

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of row 3420): a checkpoint the first Run of the preserve phase abandoned
// at its hard deadline that ends, saving its sandbox, after that Run returned and before
// the second Run (the budget moved SIGKILL later) listed the node: the second Run finds
// the sandbox paused, not running, and makes no entry of it, and the first Run's
// timed_out entry stayed in the Report, the sandbox counted lost though it was saved and
// recorded. The worker's exit now writes the Report again with it preserved (row 3740's
// correction), one entry, counted once.
//
//	0          the drain begins; the one checkpoint is held
//	+3.5 s     the kubelet's hook call again: SIGKILL moves 3.5 s later
//	+6.5 s     the first Run's hard deadline: the checkpoint abandoned, still held
//	           the second Run's listing held: the checkpoint released, it ends, the
//	           sandbox paused and recorded; the listing goes on and finds none running
//	           before: timed_out, lost 1; after: preserved, lost 0
func TestSandboxAnAbandonedCheckpointSavedBeforeTheNextRunListedIsPreserved(t *testing.T) {
	w, d, id, first, ended := drainingOne(t, map[string]string{"hold": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	hard := w.drainer.Plan().Windows(drain.PhasePreserve)[0].Hard
	var once sync.Once
	listHook = func() {
		if time.Now().Before(hard) {
			return
		}
		once.Do(func() { // the first listing after the first Run abandoned the checkpoint
			assert.NoError(t, os.Remove(filepath.Join(d.dir, "hold-"+id)))
			assert.Eventually(t, func() bool { return w.stops.inFlightOf(id) == 0 && w.pausedHere(id) },
				20*time.Second, 10*time.Millisecond, "the abandoned checkpoint did not save the sandbox")
		})
	}
	t.Cleanup(func() { listHook = func() {} })
	time.Sleep(time.Until(first.Add(-time.Second)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), earlyGrace), "SIGKILL did not move")
	rep := <-ended

	pre := preservePhase(t, rep, first)
	assert.True(t, pre.Deadline.After(first), "the phase did not run again until the new deadline")
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1, "the sandbox is counted twice")
	e := rep.Preserve.Entries[0]
	t.Logf("entry: %s after %d attempts: %s; counts %v", e.Outcome, e.Attempts, e.Error, rep.Preserve.Counts)
	assert.Equal(t, pause.Preserved, e.Outcome, "the sandbox its drain's own checkpoint saved: %s", e.Error)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 1}, rep.Preserve.Counts)
	assert.Equal(t, 0, rep.Lost())
	final := readReport(t, w)
	require.NotNil(t, final.Preserve)
	assert.Equal(t, rep.Preserve.Counts, final.Preserve.Counts, "the Report written is not the one returned")
}
