//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// Fault (a review of rows 3221 and 3260): a worker whose wait for the checkpoints its
// drain abandoned gave up (250 ms before SIGKILL) exits with one still running: runsc
// checkpoint, in a process group of its own, goes on writing. A worker restarted on the
// directory in the same PID namespace (systemd, a supervisor; not a new pod's) took the
// directory at once, and its sweep took the sandbox, which has no record until its
// checkpoint ends, for one lost running: it force-deleted it mid-save, the sandbox lost.
// The sweep now waits for that checkpoint, and records what it saved: the new worker
// lists the sandbox paused and restores it.
//
//	old worker: one sandbox; SIGTERM; its checkpoint held past the hard deadline
//	            exits 1 at SIGKILL - 250 ms, the runsc checkpoint still running
//	new worker: starts on the directory
//	            before: sweeps the sandbox (runsc delete -force): lost
//	            after: waits for the checkpoint, which ends: lists it paused; restored,
//	            its counter goes on
func TestRestartedWorkerRecordsTheCheckpointItsPredecessorLeftRunning(t *testing.T) {
	w := newCheckpointWorkers(t)
	id, oldLog := w.oldLeavesItsCheckpointRunning()
	require.Contains(t, oldLog.String(), "checkpoints the drain abandoned still running", "%s", oldLog)

	_, nextLog := w.start()
	require.Eventually(t, func() bool {
		return strings.Contains(nextLog.String(), "worker serving") || strings.Contains(nextLog.String(), sandbox.MsgAwaitingCheckpoint)
	}, 30*time.Second, 10*time.Millisecond, "the new worker neither serves nor waits: %s", nextLog)
	require.NoError(t, os.Remove(filepath.Join(w.d.dir, "hold-"+id)))
	require.Eventually(t, func() bool { return strings.Contains(nextLog.String(), "worker serving") },
		60*time.Second, 10*time.Millisecond, "the new worker did not start: %s", nextLog)
	t.Logf("new worker:\n%s", nextLog)
	w.listedPausedAndRestored(id, nextLog)
}

// Fault (a review of row 3422): the new worker waited only for a checkpoint its
// predecessor left running that still ran as it started. One that ended before (the
// save of a small sandbox takes a second; a supervisor restarts the worker a while
// after its exit) left the sandbox stopped, its image whole and no record: the sweep
// took it for one lost running and deleted it, image and all, the sandbox lost. The
// worker that gives up on a checkpoint at its exit now marks the sandbox in its bundle,
// and the next worker judges what the checkpoint left whether it still runs or not.
//
//	old worker: one sandbox; SIGTERM; its checkpoint held past the hard deadline
//	            exits 1 at SIGKILL - 250 ms, the runsc checkpoint still running
//	            the checkpoint ends: the image written, the sandbox stopped
//	new worker: starts on the directory
//	            before: sweeps the sandbox (runsc delete -force, its image removed): lost
//	            after: lists it paused; restored, its counter goes on
func TestRestartedWorkerRecordsTheCheckpointItsPredecessorLeftThatEndedBeforeIt(t *testing.T) {
	w := newCheckpointWorkers(t)
	id, oldLog := w.oldLeavesItsCheckpointRunning()
	require.Contains(t, oldLog.String(), "checkpoints the drain abandoned still running", "%s", oldLog)

	require.NoError(t, os.Remove(filepath.Join(w.d.dir, "hold-"+id)))
	require.Eventually(t, func() bool {
		calls, _ := os.ReadFile(filepath.Join(w.d.dir, "calls"))
		return slices.Contains(strings.Split(string(calls), "\n"), "checkpointed "+id)
	},
		60*time.Second, 20*time.Millisecond, "the checkpoint the old worker left running did not end")
	require.Eventually(t, func() bool { return len(w.rs.Runtime.CheckpointClients(id)) == 0 },
		10*time.Second, 10*time.Millisecond, "the wrapper, its checkpoint logged ended, did not exit")

	_, nextLog := w.start()
	require.Eventually(t, func() bool { return strings.Contains(nextLog.String(), "worker serving") },
		60*time.Second, 10*time.Millisecond, "the new worker did not start: %s", nextLog)
	t.Logf("new worker:\n%s", nextLog)
	w.listedPausedAndRestored(id, nextLog)
}

// Fault (a review of row 3422): the new worker waited without bound for a checkpoint its
// predecessor left running, before it served: one that hangs (a stuck gofer, a hung
// images volume; runsc checkpoint has no bound of its own) held the worker from serving
// for ever, every sandbox of the node refused, where before row 3422 it swept the sandbox
// and served. The wait now ends after the worker's grace: the sandbox is left as it is,
// neither recorded nor swept, marked for the worker after this one to judge, and the
// worker serves.
//
//	old worker:   one sandbox; SIGTERM; its checkpoint held past its exit
//	new worker:   waits for that checkpoint, still held
//	              before: never serves; after: serves once its grace (8 s) has passed,
//	              the sandbox not listed, its bundle kept
//	the checkpoint ends; the new worker exits
//	third worker: lists the sandbox paused
func TestRestartedWorkerServesWhenTheCheckpointItsPredecessorLeftHangs(t *testing.T) {
	w := newCheckpointWorkers(t)
	id, _ := w.oldLeavesItsCheckpointRunning()

	next, nextLog := w.start()
	require.Eventually(t, func() bool { return strings.Contains(nextLog.String(), sandbox.MsgAwaitingCheckpoint) },
		30*time.Second, 10*time.Millisecond, "the new worker does not wait for the checkpoint: %s", nextLog)
	waiting := time.Now()
	require.Eventually(t, func() bool { return strings.Contains(nextLog.String(), "worker serving") },
		earlyGrace+20*time.Second, 10*time.Millisecond, "the new worker, waiting for a checkpoint that hangs, never serves: %s", nextLog)
	t.Logf("new worker served %v after it began to wait:\n%s", time.Since(waiting).Round(time.Millisecond), nextLog)
	list, err := dial(t, w.sock).List(context.Background())
	require.NoError(t, err)
	require.Empty(t, list.Sandboxes, "a sandbox mid-save listed")
	require.DirExists(t, w.rs.Bundle(id).Dir, "the sandbox mid-save swept")
	require.NotEmpty(t, w.rs.Runtime.CheckpointClients(id), "the checkpoint that hangs was stopped")

	require.NoError(t, os.Remove(filepath.Join(w.d.dir, "hold-"+id)))
	require.Eventually(t, func() bool { return len(w.rs.Runtime.CheckpointClients(id)) == 0 },
		60*time.Second, 10*time.Millisecond, "the checkpoint did not end")
	require.NoError(t, next.Cmd.Process.Signal(syscall.SIGTERM))
	_ = next.Wait(t, 30*time.Second, "the new worker did not exit: %s", nextLog)
	_, thirdLog := w.start()
	require.Eventually(t, func() bool { return strings.Contains(thirdLog.String(), "worker serving") },
		60*time.Second, 10*time.Millisecond, "the third worker did not start: %s", thirdLog)
	list, err = dial(t, w.sock).List(context.Background())
	require.NoError(t, err)
	require.Equal(t, []SandboxReply{{ID: id, State: sandbox.Paused}}, list.Sandboxes, "the sandbox the checkpoint saved is not listed paused: %s", thirdLog)
}

// checkpointWorkers are gvisor-worker processes that take turns on one state directory,
// in this PID namespace (a supervisor's restarts, not a new pod's), their runsc a
// slowRunsc in d, which can hold a sandbox's checkpoint.
type checkpointWorkers struct {
	t         *testing.T
	dir, sock string
	d         runscDir
	rs        *sandbox.Runsc
}

func newCheckpointWorkers(t *testing.T) *checkpointWorkers {
	t.Helper()
	dir := runscConfig(t).StateDir
	w := &checkpointWorkers{t: t, dir: dir, sock: filepath.Join(dir, "worker.sock"), d: runscDir{t: t, dir: t.TempDir()}}
	slowRunsc(t, w.d.dir)                                // the workers' runsc, first in their PATH
	w.rs = sandbox.NewRunsc(filepath.Join(dir, "runsc")) // this PID namespace's, as the workers'
	t.Cleanup(func() { _ = w.rs.Runtime.DeleteAll(context.Background()) })
	return w
}

// start starts a worker on the directory, and returns it and its stderr.
func (w *checkpointWorkers) start() (*pid1test.Process, *logbuf.Buffer) {
	cmd := exec.Command(os.Args[0], "-state-dir", w.dir, "-runtime", "runsc", "-grace", earlyGrace.String(), "-concurrency", "1")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0", "PATH="+w.d.dir+":"+os.Getenv("PATH"))
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	return pid1test.Start(w.t, cmd), &stderr
}

// oldLeavesItsCheckpointRunning starts a worker with one sandbox, holds that sandbox's
// checkpoint (until the test removes the hold, or ends), and sends the worker SIGTERM:
// it exits 1, its drain's checkpoint left running. It returns the sandbox's ID and the
// worker's stderr.
func (w *checkpointWorkers) oldLeavesItsCheckpointRunning() (id string, oldLog *logbuf.Buffer) {
	t := w.t
	t.Helper()
	old, oldLog := w.start()
	waitSocket(t, w.sock, oldLog)
	r, err := dial(t, w.sock).Run(context.Background(), &RunRequest{TimeoutS: 600})
	require.NoError(t, err, "%s", oldLog)
	id = r.ID
	waitCount(t, w.rs.Bundle(id), 2)
	w.d.mark("hold", id, "")
	t.Cleanup(func() { os.Remove(filepath.Join(w.d.dir, "hold-"+id)) })
	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	require.Error(t, old.Wait(t, 30*time.Second, "the old worker did not exit: %s", oldLog), "exit status 0 with its checkpoint left running: %s", oldLog)
	return id, oldLog
}

// listedPausedAndRestored requires that the serving worker, whose stderr is nextLog,
// lists sandbox id paused and restores it: its counter goes on.
func (w *checkpointWorkers) listedPausedAndRestored(id string, nextLog *logbuf.Buffer) {
	t := w.t
	t.Helper()
	list, err := dial(t, w.sock).List(context.Background())
	require.NoError(t, err)
	require.Equal(t, []SandboxReply{{ID: id, State: sandbox.Paused}}, list.Sandboxes, "the sandbox its predecessor's checkpoint saved is not listed paused")
	saved, err := w.rs.Bundle(id).Counter()
	require.NoError(t, err)
	_, err = dial(t, w.sock).Restore(context.Background(), id)
	require.NoError(t, err, "%s", nextLog)
	waitCount(t, w.rs.Bundle(id), saved+1)
}
