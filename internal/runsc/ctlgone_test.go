//go:build linux

package runsc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault (row 1211): a sandbox whose process exited just as its checkpoint began (its
// workload's own exit, the kernel's OOM killer) was lost, not dead. runsc's checkpoint
// found it running, then could not reach its control server, gone with the process:
// "checkpoint failed: connecting to control server at PID N: connection refused" (real
// runsc, 2 of 14 checkpoints timed around a workload's exit 3). No save began, so none
// stopped the sandbox; but Checkpoint did not say ErrStopped, and the examples'
// Runsc.Pause, finding the sandbox stopped after a checkpoint that failed, called it
// "stopped by a checkpoint that failed: its state is lost" (ErrLost): a Report entry lost
// where a sandbox no checkpoint could save is vanished, and exit status 1. The PID the
// failure names, gone or a zombie, now says the container had stopped before the
// checkpoint began (ErrStopped), as runsc's own refusal of a stopped container does. A
// control server that refuses while its process runs says nothing of a stop.
func TestCheckpointThatCannotReachAnExitedSandboxIsStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for name, c := range map[string]struct {
		pid     int
		stopped bool
	}{
		"gone":    {pid: 1 << 30, stopped: true}, // a PID no process has
		"zombie":  {pid: zombieChild(t), stopped: true},
		"running": {pid: os.Getpid(), stopped: false},
	} {
		t.Run(name, func(t *testing.T) {
			rt := fakeRuntime(t, fmt.Sprintf("ctlgone:%d", c.pid))
			err := rt.Checkpoint(ctx, "sb", filepath.Join(t.TempDir(), "img"))
			require.Error(t, err)
			assert.Equal(t, c.stopped, errors.Is(err, ErrStopped), "%s", err)
			assert.ErrorContains(t, err, "connection refused", "runsc's words kept")
		})
	}
}

// Fault (row 1393): a checkpoint whose call never reached the sandbox was a checkpoint
// that failed, and the examples' Runsc.Pause, finding the container stopped after it,
// called the sandbox lost by it (ErrLost, exit status 1) where it had died before any save
// began: its control server refused the connection while its process was still ending,
// not yet the zombie row 1211 looks for (real runsc: 2 of the 4 refusals in 90
// checkpoints raced with a SIGTERM sent 0-15 ms after they began), or the process closed
// the connection with the call unread ("urpc method \"containerManager.Checkpoint\"
// failed: connection reset by peer": once in about 150 checkpoints timed around a
// workload's exit, the container stopped after it). Either, followed by the container
// stopped, is now ErrStopped; one whose container still runs stays a failure.
func TestCheckpointWhoseCallNeverReachedTheSandboxIsStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := fakeRuntime(t, "reset:stopped").Checkpoint(ctx, "sb", filepath.Join(t.TempDir(), "img"))
	require.ErrorIs(t, err, ErrStopped, "the container stopped with the call unread")
	assert.ErrorContains(t, err, "connection reset by peer")

	// A control server that refused while its process was still ending (not yet a
	// zombie: row 1211's check missed it), the container stopped after it.
	err = fakeRuntime(t, "ctlstopped:"+fmt.Sprint(os.Getpid())).Checkpoint(ctx, "sb", filepath.Join(t.TempDir(), "img"))
	require.ErrorIs(t, err, ErrStopped, "refused, then the container stopped")

	short, cancelShort := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelShort()
	err = fakeRuntime(t, "reset:"+fmt.Sprint(os.Getpid())).Checkpoint(short, "sb", filepath.Join(t.TempDir(), "img"))
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrStopped, "its sandbox process runs: nothing says it stopped")
	assert.ErrorIs(t, err, ErrNotReached, "no save began (row 1782: said at once, not after StopWait)")
}

// A checkpoint whose image directory cannot be made (a read-only or full images volume)
// never runs runsc: no save began, so none can have stopped the container. Its error was
// the mkdir's alone, which the examples' Runsc.Pause took for a checkpoint that failed: a
// sandbox found stopped after it, dead on its own, was called lost by it. It now says
// what a call that never reached the sandbox says: stopped (ErrStopped), or not reached
// (ErrNotReached).
func TestCheckpointWhoseImageDirectoryCannotBeMadeSaysWhetherTheContainerStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	notADir := filepath.Join(t.TempDir(), "images")
	require.NoError(t, os.WriteFile(notADir, nil, 0o600))
	imageDir := filepath.Join(notADir, "sb")

	err := fakeRuntime(t, "exited:stopped").Checkpoint(ctx, "sb", imageDir)
	require.ErrorIs(t, err, ErrStopped, "the container had stopped: %v", err)
	assert.ErrorContains(t, err, "making its image directory")

	err = fakeRuntime(t, "running").Checkpoint(ctx, "sb", imageDir) // runsc state: running
	require.ErrorIs(t, err, ErrNotReached, "no save began: %v", err)
	assert.ErrorContains(t, err, "its container is not stopped")
	assert.NotErrorIs(t, err, ErrStopped)
}

// Fault (a review of row 2221's NotBegun): a checkpoint whose image directory cannot be
// made looks at its container with the checkpoint's context, which the examples'
// Runsc.Pause gives no end (a checkpoint is never cut): a `runsc state` that hangs (a
// container lock held, a runsc stuck under load) held the Pause forever, its sandbox in
// transition, which a drain's escalation never signals. The look is bounded, as Pause's
// after a last image that cannot be removed is (5 s): then the state cannot say, and
// the error is ErrNotReached.
func TestCheckpointNotBegunLooksAtItsContainerForABoundedTime(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "images")
	require.NoError(t, os.WriteFile(notADir, nil, 0o600))
	rt := fakeRuntime(t, "hang") // runsc state never answers
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- rt.Checkpoint(context.Background(), "sb", filepath.Join(notADir, "sb")) }()
	select {
	case err := <-done:
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
		assert.ErrorIs(t, err, ErrNotReached)
		assert.ErrorContains(t, err, "its state cannot say whether it stopped")
	case <-time.After(3 * NotBegunWait):
		t.Fatalf("the checkpoint that never began still waits for runsc state after %v", time.Since(start).Round(time.Second))
	}
}
