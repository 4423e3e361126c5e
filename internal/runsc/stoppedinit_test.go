//go:build linux

package runsc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause/escalate"
)

// A container whose init saves on SIGTERM, stopped when the drain signals it (SIGSTOP
// from a debugger inside the sandbox, a job-control stop), saves and exits as a running
// one does: the Policy's SIGCONT, `runsc kill ID 18` to the init as its SIGTERM is,
// continues it in gVisor's kernel, which then delivers the pending SIGTERM.
//
//	init: traps TERM ── SIGSTOP ── State T ── SIGTERM ── SIGCONT ── saves, exits 0
//	Stop:                                   0 s ──────────────────── Exited (0.08 s)
//
// Fault: the Policy sent SIGTERM alone, which gVisor, as Linux, holds pending in a
// stopped init with a handler: it was SIGKILLed at TermWait (5 s), ExitedAfterKill, its
// state not saved.
func TestStoppedInitIsContinuedAndSavesOnSIGTERM(t *testing.T) {
	rt := realRuntime(t)
	b := startActor(t, rt, containerID("stopped"), []string{"/bin/sh", "-c", `mkfifo /tmp/f && exec 3<>/tmp/f
trap 'echo saved > /saved; exit 0' TERM
echo ready > /ready
while true; do read -t 0.1 x <&3; done`}, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, rt.Kill(ctx, containerID("stopped"), syscall.SIGSTOP, false))
	waitInitStopped(t, rt, containerID("stopped"))

	start := time.Now()
	exit, err := escalate.Policy{TermWait: 5 * time.Second, KillWait: 2 * time.Second}.Stop(ctx, rt.Target(containerID("stopped")))
	t.Logf("%s after %v", exit, time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
	assert.Equal(t, escalate.Exited, exit, "ended by its SIGTERM, not killed")
	saved, err := os.ReadFile(filepath.Join(b.Rootfs(), "saved"))
	require.NoError(t, err, "the init saved")
	assert.Equal(t, "saved\n", string(saved))
}

// waitInitStopped waits (at most 30 s) until gVisor's kernel says container id's init is
// stopped by a signal (its /proc/1/status, read with runsc exec).
func waitInitStopped(t *testing.T, rt *Runtime, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := rt.output(ctx, id, "exec", id, "/bin/cat", "/proc/1/status")
		return err == nil && strings.Contains(string(out), "State:\tT (stopped)")
	}, 30*time.Second, 50*time.Millisecond)
}
