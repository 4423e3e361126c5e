//go:build linux

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault (row 3221, a review of the state directory's lock): a worker released the state
// directory when its drain was over, while a checkpoint the drain had abandoned at the
// Preserver's hard deadline still ran (runsc's is never cut). A worker restarted on the
// directory in the same PID namespace (a supervisor's restart) took it at once, and its
// sweep took the sandbox still checkpointing for one lost running: it force-deleted it
// mid-save, and the sandbox was lost where its checkpoint would have saved it. The old
// worker now holds the directory until its abandoned checkpoints end, recorded; the new
// one waits, then restores the sandbox.
//
//	0          the drain begins; the one checkpoint is held
//	+6.5 s     the hard deadline: the checkpoint abandoned; the Report written
//	           the new worker starts on the directory
//	           before: takes it, force-deletes the sandbox; after: waits for it
//	then       the checkpoint ends: the old worker records the sandbox, releases the directory
//	           the new worker lists it paused and restores it; it counts on
func TestWorkerRestartedDuringAnAbandonedCheckpointRestoresItsSandbox(t *testing.T) {
	w, d, id, _, ended := drainingOne(t, map[string]string{"hold": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	rs := w.rt.(*sandbox.Runsc)
	awaitReport(t, w)
	require.NotEmpty(t, w.stops.inFlight(), "the abandoned checkpoint is still in flight once the drain is over")

	var logs logbuf.Buffer
	cfg := w.cfg
	cfg.Socket = filepath.Join(t.TempDir(), "next.sock")
	started := make(chan *Worker, 1)
	go func() {
		next, err := newWorker(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		assert.NoError(t, err)
		started <- next
	}()
	const waiting = "state directory held by another server; waiting for it to exit before touching it"
	var next *Worker
	require.Eventually(t, func() bool {
		select {
		case next = <-started:
			return true
		default:
			return strings.Contains(logs.String(), waiting)
		}
	}, 30*time.Second, 10*time.Millisecond, "the new worker neither waits nor starts: %s", &logs)
	assert.True(t, next == nil, "the new worker took the directory while the old one's checkpoint ran: %s", &logs)

	d.release("hold", id)
	rep := <-ended
	require.Len(t, rep.Preserve.Entries, 1)
	assert.Contains(t, rep.Preserve.Entries[0].Error, "timed_out when the preserve phase ended", "the drain abandoned the checkpoint")
	assert.Equal(t, pause.Preserved, rep.Preserve.Entries[0].Outcome, "its checkpoint saved it while the worker waited at its exit (row 3740)")
	if next == nil {
		next = <-started
	}
	require.NotNil(t, next)
	t.Cleanup(func() { next.close(nil) })
	assert.Contains(t, next.node.List(), sandbox.Info{ID: id, State: sandbox.Paused, TimeoutS: 86400},
		"the new worker does not list the sandbox the abandoned checkpoint saved: %s", &logs)
	saved, err := rs.Bundle(id).Counter()
	require.NoError(t, err)
	_, err = next.node.Resume(context.Background(), id)
	require.NoError(t, err, "%s", &logs)
	waitCount(t, rs.Bundle(id), saved+1)
}

// awaitReport waits until w's drain is over, its Report written (no longer "unfinished"):
// the worker's serve then goes on to close.
func awaitReport(t *testing.T, w *Worker) {
	t.Helper()
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(w.cfg.StateDir, reportFile))
		return err == nil && len(data) > 0 && !strings.Contains(string(data), `"unfinished"`)
	}, 30*time.Second, 10*time.Millisecond, "the worker's drain did not end")
}
