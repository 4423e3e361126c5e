//go:build linux

package proc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/realpart"
)

// sleeper starts `sleep 60`, killed and reaped at the test's end.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		realpart.Missing(t, fmt.Sprintf("no sleep binary (coreutils): %v", err))
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// isZombie reports whether pid has exited and not been reaped.
func isZombie(t *testing.T, pid int) bool {
	t.Helper()
	st, err := procstat.Read(pid)
	require.NoError(t, err)
	return st.State == 'Z'
}

// Wait honours its context, sees the exit of a zombie without reaping it,
// and keeps answering after the parent reaped it.
func TestWaitSeesTheExitWithoutReaping(t *testing.T) {
	cmd := sleeper(t)
	p, err := proc.Open(cmd.Process.Pid)
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, cmd.Process.Pid, p.Pid())

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, p.Wait(ctx), context.DeadlineExceeded)
	assert.False(t, p.Exited())

	require.NoError(t, p.Signal(syscall.SIGKILL))
	require.NoError(t, p.Wait(context.Background()))
	assert.True(t, p.Exited())
	assert.True(t, isZombie(t, cmd.Process.Pid), "not reaped: the parent still owns the child")

	err = cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%v %v", ws, err)
	require.NoError(t, p.Wait(context.Background()), "the pidfd still answers once reaped")
	assert.ErrorIs(t, p.Signal(syscall.SIGTERM), os.ErrProcessDone, "an exited process is done, never another one")
}

// A Wait in progress wakes at once when its context is cancelled.
func TestWaitWakesOnCancel(t *testing.T) {
	p, err := proc.Open(sleeper(t).Process.Pid)
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Wait(ctx) }()
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake on cancel")
	}
}

func TestClosedHandleRefusesEveryCall(t *testing.T) {
	p, err := proc.Open(sleeper(t).Process.Pid)
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "twice is not an error")
	assert.ErrorIs(t, p.Signal(syscall.SIGTERM), proc.ErrClosed)
	assert.ErrorIs(t, p.Wait(context.Background()), proc.ErrClosed)
	assert.False(t, p.Exited())
}

func TestOpenFailsForNoProcess(t *testing.T) {
	_, err := proc.Open(0)
	assert.ErrorContains(t, err, "must be > 0")
	_, err = proc.Open(1 << 22) // above pid_max's ceiling
	assert.True(t, errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.EINVAL), "%v", err)

	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		realpart.Missing(t, fmt.Sprintf("no true binary (coreutils): %v", err))
	}
	_, err = proc.Open(cmd.Process.Pid) // reaped: gone (unless the PID was reused meanwhile)
	if err != nil {
		assert.ErrorIs(t, err, os.ErrProcessDone)
	}
}

// Dup holds the child os/exec made, through its own pidfd: it signals the
// child, still sees its exit once another reaper took it (where Open of
// its PID would pin whichever process got the PID next), and refuses a
// Process already waited for.
func TestDupHoldsTheChildOsExecMade(t *testing.T) {
	cmd := sleeper(t)
	p, err := proc.Dup(cmd.Process)
	if errors.Is(err, os.ErrNoHandle) {
		t.Skipf("os/exec made the child without a pidfd (kernel before 5.4?): %v", err)
	}
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, cmd.Process.Pid, p.Pid())
	require.NoError(t, p.Signal(syscall.SIGTERM))
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(cmd.Process.Pid, &ws, 0, nil) // another reaper, behind os/exec's back
	require.NoError(t, err)
	assert.Equal(t, syscall.SIGTERM, ws.Signal(), "the signal reached the child")
	assert.True(t, p.Exited(), "reaped: the pidfd still says it exited")
	assert.ErrorIs(t, p.Signal(syscall.SIGKILL), os.ErrProcessDone)

	done := exec.Command("true")
	if err := done.Run(); err != nil {
		realpart.Missing(t, fmt.Sprintf("no true binary (coreutils): %v", err))
	}
	_, err = proc.Dup(done.Process)
	assert.ErrorIs(t, err, os.ErrProcessDone, "waited for: its pidfd is closed")
}

// A process that is no namespace's init gets every signal: a plain child does not discard
// SIGTERM.
func TestChildThatIsNoNamespaceInitDiscardsNothing(t *testing.T) {
	p, err := proc.Open(sleeper(t).Process.Pid)
	require.NoError(t, err)
	defer p.Close()
	got, err := p.Discards(syscall.SIGTERM)
	require.NoError(t, err)
	assert.False(t, got)
}
