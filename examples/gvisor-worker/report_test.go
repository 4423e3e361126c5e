//go:build linux

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
)

// A sandbox whose timeout passed just before SIGTERM is being deleted (`runsc delete
// -force`, about 2 s) when the drain ends, which leaves only its margin before SIGKILL.
// The worker closed its sandbox node, which waits for deletions in progress, before it
// wrote last-shutdown.json and the termination message: the Report was what SIGKILL cut
// (sandboxd's entry 54, in the worker). The Report is now written first: it exists while
// the deletion still runs.
func TestReportIsWrittenBeforeATimeoutDeletionEnds(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	dir := t.TempDir()
	rt := sandbox.NewRunsc(filepath.Join(dir, "runsc")) // the worker's, in this PID namespace
	t.Cleanup(func() { _ = rt.Runtime.DeleteAll(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"-state-dir", dir, "-runtime", "runsc", "-grace", "10s",
			"-pause-latency", "1s", "-termination-log", filepath.Join(dir, "termination-log")}, &stderr)
	}()
	defer func() { cancel(); <-exit }()
	sock := filepath.Join(dir, "worker.sock")
	waitSocket(t, sock, &stderr)
	c := dial(t, sock)
	r, err := c.Run(context.Background(), &RunRequest{TimeoutS: 1})
	require.NoError(t, err, "%s", &stderr)
	require.Eventually(t, func() bool {
		list, err := c.List(context.Background())
		return err == nil && len(list.Sandboxes) == 1 && list.Sandboxes[0].State == sandbox.Deleting
	}, 30*time.Second, time.Millisecond, "the timeout's deletion did not start: %s", &stderr)

	cancel() // SIGTERM, with the deletion in progress
	report := filepath.Join(dir, "last-shutdown.json")
	var deleting bool // the deletion still ran when the Report appeared
	require.Eventually(t, func() bool {
		if !lastreporttest.Finished(report) {
			return false
		}
		_, err := os.Stat(rt.Bundle(r.ID).Dir) // Destroy removes it once runsc delete returned
		deleting = err == nil
		return true
	}, time.Minute, time.Millisecond, "no Report: %s", &stderr)
	assert.True(t, deleting, "last-shutdown.json was written before the sandbox node waited for the deletion")
	assert.Equal(t, 0, <-exit, "%s", &stderr)
	exit <- 0
	_, err = os.Stat(rt.Bundle(r.ID).Dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the deletion ended before the worker exited")
	_, err = os.Stat(filepath.Join(dir, "termination-log"))
	assert.NoError(t, err, "the termination message is written")
}

// The learned rates are saved after the Report and the termination message, as
// sandboxd's are (docs/faults.md row 364): a Save held up (its fsyncs behind the
// checkpoints' writeback on a loaded disk, here a FIFO in the rates file's place that its
// read waits on) spent the headroom left before SIGKILL, and the Report and the pod's
// last state were never written.
func TestReportIsWrittenBeforeTheLearnedRates(t *testing.T) {
	cfg := fakeConfig(t)
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	_, _, stop := serveWorker(t, cfg)
	rates := filepath.Join(cfg.StateDir, learned.File)
	require.NoError(t, syscall.Mkfifo(rates, 0o600))
	done := make(chan *drain.Report, 1)
	go func() { done <- stop() }() // as SIGTERM would

	report := filepath.Join(cfg.StateDir, "last-shutdown.json")
	written := func() bool {
		_, merr := os.Stat(cfg.TerminationLog)
		return lastreporttest.Finished(report) && merr == nil
	}
	wrote := assert.Eventually(t, written, 30*time.Second, 10*time.Millisecond,
		"the Report and the termination message written while the learned rates' save waits")
	w, err := os.OpenFile(rates, os.O_WRONLY, 0) // lets the save go on: its read ends empty
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, (<-done).Err())
	require.True(t, wrote)
	_, err = learned.Read(rates)
	assert.NoError(t, err, "the rates saved all the same, over the FIFO")
}

// A Report write (durable.WriteFile) that the kubelet's SIGKILL cut between its create and
// its rename left its temporary file on the state directory, a hostPath, and no worker
// ever removed it: one more for every drain cut there. The worker that takes the
// directory removes them, logged; a record's, which it reports and keeps for a person,
// stays.
func TestStartRemovesWhatACutReportWriteLeft(t *testing.T) {
	cfg := fakeConfig(t)
	cut := filepath.Join(cfg.StateDir, "."+reportFile+".k2j9x1.tmp") // as a SIGKILL in its fsync leaves it
	require.NoError(t, os.WriteFile(cut, []byte(`{"start": "2026-12-05T00:00:00Z", "phases": [{"na`), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(cfg.StateDir, "records"), 0o700))
	record := filepath.Join(cfg.StateDir, "records", ".sb-1.rec.k2j9x1.tmp")
	require.NoError(t, os.WriteFile(record, []byte("drainkit-record/1 "), 0o600))

	var logs logbuf.Buffer
	w, err := newWorker(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer w.close(nil)
	assert.NoFileExists(t, cut, "removed at start:\n%s", &logs)
	assert.Contains(t, logs.String(), `msg="removed what a write cut short left`)
	assert.FileExists(t, record, "a record's: reported, left for a person")
}
