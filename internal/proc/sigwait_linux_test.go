//go:build linux

package proc_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/internal/proc/proctest"
	"github.com/drainkit/drainkit/internal/realpart"
)

// sigwaitEnv makes the test binary run proctest.SigwaitInit, writing the file it names.
const sigwaitEnv = "DRAINKIT_PROC_SIGWAIT"

func init() {
	if state := os.Getenv(sigwaitEnv); state != "" { // before TestMain: this process is the helper
		os.Exit(proctest.SigwaitInit(state))
	}
}

// Fault (a review of row 2220's fix): the init of a PID namespace that waits for SIGTERM in
// sigwait (tini, dumb-init, catatonit), SIGTERM's action the default, has it out of the
// blocked mask /proc/PID/status shows while it waits, and blocked for the kernel (the mask
// of before the wait, kept aside), which delivers it to the wait. Discards said the kernel
// discarded it; it now sees the wait in /proc/PID/syscall and says nothing is discarded.
func TestDiscardsNothingToAnInitWaitingInSigwait(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), sigwaitEnv+"="+state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	err = cmd.Start()
	if errors.Is(err, syscall.EPERM) {
		realpart.Missing(t, "a PID namespace of the test's own needs CAP_SYS_ADMIN: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	require.Eventually(t, func() bool { return proctest.InSigwait(cmd.Process.Pid) }, 10*time.Second, 5*time.Millisecond,
		"the init never waited in sigwait")

	p, err := proc.Dup(cmd.Process)
	require.NoError(t, err)
	defer p.Close()
	discards, err := p.Discards(syscall.SIGTERM)
	require.NoError(t, err)
	require.False(t, discards, "SIGTERM said discarded by an init that waits for it")
	require.NoError(t, p.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "the init did not take SIGTERM from its wait and exit 0")
	assert.FileExists(t, state)
}
