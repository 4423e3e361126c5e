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
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of rows 3221 and 3260): a checkpoint the first Run of the preserve phase
// abandoned at its hard deadline runs on (runsc's is never cut); when the budget moved
// SIGKILL later (a restarted kubelet's hook call), the phase runs the Preserver again, and
// that Run found the sandbox pausing, waited, and found it paused by that checkpoint:
// "already preserved", pause.ErrGone, and the Report said vanished, as of a sandbox that
// had died. It was preserved, by the drain's own checkpoint, late: the Report now says
// preserved, one entry, counted once.
//
//	0          the drain begins; the one checkpoint is held
//	+3.5 s     the kubelet's hook call again: SIGKILL moves 3.5 s later
//	+6.5 s     the first Run's hard deadline: the checkpoint abandoned, still held
//	           the second Run lists the sandbox pausing and waits for it
//	then       the checkpoint is released and ends: the sandbox paused and recorded
//	           before: vanished; after: preserved
func TestSandboxTheDrainsAbandonedCheckpointSavedIsPreserved(t *testing.T) {
	w, d, id, first, ended := drainingOne(t, map[string]string{"hold": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	time.Sleep(time.Until(first.Add(-time.Second)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), earlyGrace), "SIGKILL did not move")
	require.Eventually(t, func() bool { return w.stops.inFlightOf(id) == 2 }, 20*time.Second, 10*time.Millisecond,
		"no second checkpoint of the sandbox began beside the abandoned one")
	d.release("hold", id)
	rep := <-ended

	pre := preservePhase(t, rep, first)
	assert.True(t, pre.Deadline.After(first), "the phase did not run again until the new deadline")
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	t.Logf("entry: %s after %d attempts: %s", e.Outcome, e.Attempts, e.Error)
	assert.Equal(t, pause.Preserved, e.Outcome, "the sandbox its drain's own checkpoint saved: %s", e.Error)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 1}, rep.Preserve.Counts)
	assert.NoError(t, rep.Err())
	assert.Contains(t, w.node.List(), sandbox.Info{ID: id, State: sandbox.Paused, TimeoutS: 86400})
	assert.Equal(t, drain.OK, pre.Result, pre.Error)
}

// Fault (a flaky run of the test above under load): the abandoned checkpoint's save
// settles the sandbox paused, which wakes the second Run's checkpoint waiting for it,
// before that save is recorded in stops; the second one, asking at once, found no save
// and its "already preserved" stayed: vanished. Here the abandoned checkpoint is held
// between its return and its record until the second one has returned too.
//
//	0          the drain begins; the one checkpoint is held
//	+3.5 s     the kubelet's hook call again: SIGKILL moves 3.5 s later
//	+6.5 s     the first Run's hard deadline: the checkpoint abandoned, still held
//	           the second Run lists the sandbox pausing and waits for it
//	then       the checkpoint is released and saves the sandbox, paused; its record
//	           in stops held until the second checkpoint has returned "already preserved"
//	           before: vanished; after: preserved
func TestSandboxTheDrainsAbandonedCheckpointSavedIsPreservedThoughItsSaveIsRecordedLast(t *testing.T) {
	secondReturned := make(chan struct{})
	var once sync.Once
	preserveReturnedHook = func(joined bool) {
		if joined {
			once.Do(func() { close(secondReturned) })
			return
		}
		select {
		case <-secondReturned:
		case <-time.After(30 * time.Second): // no second checkpoint: the assertions say so
		}
	}
	t.Cleanup(func() { preserveReturnedHook = func(bool) {} })
	w, d, id, first, ended := drainingOne(t, map[string]string{"hold": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	time.Sleep(time.Until(first.Add(-time.Second)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), earlyGrace), "SIGKILL did not move")
	require.Eventually(t, func() bool { return w.stops.inFlightOf(id) == 2 }, 20*time.Second, 10*time.Millisecond,
		"no second checkpoint of the sandbox began beside the abandoned one")
	d.release("hold", id)
	rep := <-ended

	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	t.Logf("entry: %s after %d attempts: %s", e.Outcome, e.Attempts, e.Error)
	assert.Equal(t, pause.Preserved, e.Outcome, "the sandbox its drain's own checkpoint saved: %s", e.Error)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 1}, rep.Preserve.Counts)
	assert.NoError(t, rep.Err())
	assert.Contains(t, w.node.List(), sandbox.Info{ID: id, State: sandbox.Paused, TimeoutS: 86400})
}
