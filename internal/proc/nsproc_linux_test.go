//go:build linux

package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/internal/realpart"
)

// nsProcEnv makes the test binary run nsProcMain: PID 1 of a PID namespace of its own
// that kept its parent's /proc, as a server started by `unshare --pid --fork` without
// --mount-proc runs.
const nsProcEnv = "DRAINKIT_PROC_NSPROC"

func init() {
	if os.Getenv(nsProcEnv) != "" { // before TestMain: this process is the helper
		os.Exit(nsProcMain())
	}
}

// nsProcMain starts sleep as PID 1 of a namespace nested in its own (a small PID here, after
// the helper's threads, which in the parent's /proc names another process) and prints what
// Discards says of SIGTERM to it.
func nsProcMain() int {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return 1
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	p, err := proc.Dup(cmd.Process)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer p.Close()
	discards, err := p.Discards(syscall.SIGTERM)
	fmt.Printf("pid %d: discards %v (%v)\n", p.Pid(), discards, err)
	return 0
}

// A process whose /proc is its parent's PID namespace's (a server in a PID namespace of its
// own that did not mount one) knows its child by a PID that names another process in that
// /proc: Discards reads the child's status by the PID its pidfd has there, never another
// process's (read by that PID, another process's status said nothing was discarded). Here
// the child, the init of its own namespace with no handler, has a PID of a few to the
// helper, which the host's /proc gives to a host process.
func TestDiscardsReadsTheProcessOfItsPidfdInAProcOfAnotherNamespace(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nsProcEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		realpart.Missing(t, "a PID namespace of the test's own needs CAP_SYS_ADMIN: "+err.Error())
	}
	require.NoError(t, err, string(out))
	t.Log(strings.TrimSpace(string(out)))
	require.Contains(t, string(out), ": discards true (<nil>)", "the status read was not the child's")
}
