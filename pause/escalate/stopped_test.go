package escalate_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/pause/escalate"
)

// A sandbox stopped when the drain signals it (SIGSTOP from a debugger, a job-control
// stop) saves its state on SIGTERM as a running one does, and its Report entry says
// preserved:
//
//	child: saves on SIGTERM ── SIGSTOP ── stopped ('T') ── SIGTERM ── SIGCONT ── saves, exits 0
//	Stop:                                                 0 s ───────────────────── Exited
//
// Fault: Stop sent SIGTERM alone. A stopped process that handles SIGTERM keeps it
// pending and stays stopped (only SIGKILL ends a stopped process), so the child never
// saved: the wait after the signal ran out, SIGKILL came at TermWait (5 s here), and the
// Report said ErrKilled, its state lost. Stop now sends SIGCONT right after the signal, as
// systemd does after every kill signal but SIGKILL.
func TestAStoppedSandboxIsContinuedAndSavesOnSIGTERM(t *testing.T) {
	cmd, state := child(t, "trap")
	require.NoError(t, syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP))
	waitStopped(t, cmd.Process.Pid)

	sb := &escalate.Sandbox{Name: "stopped", Target: escalate.Cmd(cmd),
		Policy: escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := sb.Preserve(ctx)
	t.Logf("Preserve returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	require.NoError(t, err, "preserved: it saved on SIGTERM")
	saved, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Equal(t, "saved", string(saved))
	require.NotNil(t, cmd.ProcessState, "reaped")
	assert.Equal(t, 0, cmd.ProcessState.ExitCode(), "it exited on its own, not by SIGKILL")
}

// waitStopped waits (at most 10 s) until pid is stopped by a signal.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for range 1000 {
		st, err := procstat.Read(pid)
		require.NoError(t, err)
		if st.State == 'T' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("process %d was not stopped", pid)
}

// A SIGCONT that fails (a runtime's kill refused) leaves a stopped sandbox stopped, its
// SIGTERM pending: its Report entry says so beside ErrKilled, where a SIGKILL alone reads
// as a sandbox too slow to save itself.
func TestAFailedSIGCONTIsInTheReportOfASandboxKilledAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		killed := make(chan struct{})
		target := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				switch sig {
				case syscall.SIGCONT:
					return errors.New("runsc kill: exit status 1")
				case syscall.SIGKILL:
					close(killed)
				}
				return nil
			},
			WaitFunc: func(ctx context.Context) error {
				select {
				case <-killed:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
		}
		sb := &escalate.Sandbox{Name: "stopped", Target: target,
			Policy: escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}}
		start := time.Now()
		err := sb.Preserve(t.Context())
		assert.Equal(t, 5*time.Second, time.Since(start), "SIGKILL at TermWait")
		require.ErrorIs(t, err, escalate.ErrKilled)
		assert.ErrorContains(t, err, "sending SIGCONT after SIGTERM (a stopped target acts on SIGTERM only once continued): runsc kill: exit status 1")
	})
}
