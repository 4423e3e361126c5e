//go:build linux

package escalate_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc/proctest"
	"github.com/drainkit/drainkit/pause/escalate"
)

// sigwaitMode is the helper mode of an init that waits for its signals as tini, dumb-init
// and catatonit do: SIGTERM left at its default action, blocked, and taken by sigwait.
const sigwaitMode = "sigwait"

func init() {
	// In init, on the process's first thread, whose mask and wait the kernel looks at for
	// a signal sent to the process: before TestMain, this process is the helper.
	if os.Getenv(helperEnv) == sigwaitMode {
		os.Exit(proctest.SigwaitInit(os.Getenv("ESCALATE_TEST_STATE")))
	}
}

// Fault (a review of row 2220's fix): an init that blocks SIGTERM and waits for it in
// sigwait (tini, dumb-init, catatonit: a container's init, forwarding the signal to its
// child) has SIGTERM out of its blocked mask while it waits (the kernel keeps the mask of
// before the wait aside, in real_blocked, which /proc/PID/status does not show), and no
// handler for it. Read from /proc/PID/status alone, the signal was said discarded: Stop
// SIGKILLed the init at once, its child with it, where the kernel delivers SIGTERM to
// the wait and the init saves itself. (Without the fix this fails when the look after the
// send still finds the init waiting, 11 of 20 runs here: one that has already taken the
// signal blocks it again; TestDiscardsNothingToAnInitWaitingInSigwait, internal/proc,
// fails every time.)
//
//	an init in sigwait(SIGTERM), SIGTERM's action the default -> SIGTERM
//	  -> before: "discarded", SIGKILL at once, nothing saved
//	  -> after: delivered, the init saves itself and exits: Exited
func TestNamespaceInitWaitingForTheSignalInSigwaitGetsIt(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+sigwaitMode, "ESCALATE_TEST_STATE="+state)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	nsInit(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	require.Eventually(t, func() bool { return proctest.InSigwait(cmd.Process.Pid) }, 10*time.Second, 5*time.Millisecond,
		"the init never waited in sigwait")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: time.Second}.Stop(ctx, escalate.Cmd(cmd))
	t.Logf("stop: %s after %v (%v)", exit, time.Since(start).Round(time.Millisecond), err)
	require.NoError(t, err, "the init waiting for SIGTERM was said to never get it")
	assert.Equal(t, escalate.Exited, exit)
	assert.FileExists(t, state, "the init did not save itself: SIGKILLed")
}
