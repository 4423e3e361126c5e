//go:build linux

package escalate_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/pause/escalate"
)

// nsInit starts cmd as PID 1 of a PID namespace of its own (a sandbox's init), or skips
// the test where that needs a privilege it does not have.
func nsInit(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	if errors.Is(err, syscall.EPERM) {
		realpart.Missing(t, "a PID namespace of the test's own needs CAP_SYS_ADMIN: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
}

// Fault: the kernel discards a signal sent to a PID namespace's init that has no handler
// for it (SIGNAL_UNKILLABLE; only SIGKILL and SIGSTOP from an ancestor namespace are
// forced): a sandbox's init that never installed one never got the SIGTERM. Stop took the
// send for delivered and waited the whole wait after the signal (a slot of the Preserver
// held for it, 30 s by default), then SIGKILLed it and said nothing of why, as if the
// target had been too slow to save itself. A signal the kernel discards is one that did
// not go out: SIGKILL at once, and the error says so.
//
//	sleep as PID 1 of its namespace, no handler -> SIGTERM discarded by the kernel
//	  -> SIGKILL at once (not at the end of the 20 s wait) -> exited_after_kill, saying why
func TestSignalTheKernelDiscardsForANamespaceInitIsNotWaitedFor(t *testing.T) {
	cmd := exec.Command("sleep", "3600")
	nsInit(t, cmd)
	// sleep installs no handler; Start returns once it runs (its exec done).
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: time.Second}.Stop(ctx, escalate.Cmd(cmd))
	took := time.Since(start)
	t.Logf("stop: %s after %v (%v)", exit, took.Round(time.Millisecond), err)
	assert.Equal(t, escalate.ExitedAfterKill, exit)
	require.Error(t, err, "the error does not say that the target never got SIGTERM")
	assert.Contains(t, err.Error(), "the kernel discarded it, never delivered: the target (pid")
	assert.Less(t, took, 10*time.Second, "the wait after a signal the kernel discarded was not cut")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
}

// A namespace's init that handles SIGTERM gets it, saves itself and exits: only one with no
// handler has its signal discarded.
func TestNamespaceInitHandlingTheSignalSavesItselfAndExits(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=trap", "ESCALATE_TEST_STATE="+state)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	nsInit(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: time.Second}.Stop(ctx, escalate.Cmd(cmd))
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit)
	assert.FileExists(t, state, "the init did not save itself on SIGTERM")
}
