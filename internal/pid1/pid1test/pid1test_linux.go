package pid1test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// ProcEnv, in the environment of a process StartPID1 starts, makes MountProc mount a /proc
// of the process's own PID namespace, as a container runtime does for a pod's container
// before it starts the command.
const ProcEnv = "DRAINKIT_PID1TEST_MOUNT_PROC"

// MountProc, called first in the role process's TestMain, mounts a proc filesystem on
// /proc in the process's own mount namespace (StartPID1 starts it with one, made private),
// so /proc shows its PID namespace, and removes ProcEnv so that no process started later
// mounts it again. Without ProcEnv it does nothing and returns nil.
func MountProc() error {
	if os.Getenv(ProcEnv) == "" {
		return nil
	}
	if err := os.Unsetenv(ProcEnv); err != nil {
		return err
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// A Process is a command a test started, and its exit.
type Process struct {
	// Cmd is the started command; Cmd.ProcessState is set once Wait has returned.
	Cmd    *exec.Cmd
	exited chan error
}

// Start starts cmd as it is (its stdio, environment and SysProcAttr as the caller set
// them). The test's cleanup kills it and waits for its exit.
func Start(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	require.NoError(t, cmd.Start())
	p := &Process{Cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	// A SIGKILL to PID 1 kills every process of its namespace.
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.exited })
	return p
}

// StartPID1 starts cmd as PID 1 of a new PID namespace, in a mount namespace of its own
// (made private, so that MountProc's /proc stays in it), and killed by SIGKILL if the
// test process goes first; it needs root. Otherwise as Start. ProcEnv in cmd.Env makes
// the process mount its /proc (MountProc).
func StartPID1(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig: syscall.SIGKILL}
	return Start(t, cmd)
}

// Exited reports, without waiting, whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case err := <-p.exited:
		p.exited <- err // for Wait, and the cleanup
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to exit and returns the error of its
// Cmd.Wait (nil for exit status 0). Past timeout it fails the test with the message
// format and args make.
func (p *Process) Wait(t testing.TB, timeout time.Duration, format string, args ...any) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err // for the next Wait, and the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf(format, args...)
		return nil
	}
}

// NoZombies waits until no process of the PID namespace whose PID 1 is the host process
// init has exited unreaped. A zombie that a working init has not yet reaped is gone
// within milliseconds of its SIGCHLD; one nobody reaps stays until the namespace ends.
func NoZombies(t testing.TB, init int) {
	t.Helper()
	var zombies []string
	ok := assert.Eventually(t, func() bool {
		var found []string
		for _, p := range Processes(t, init) {
			if z, ok := strings.CutSuffix(p, " Z"); ok {
				found = append(found, z)
			}
		}
		zombies = found
		return len(zombies) == 0
	}, 10*time.Second, 10*time.Millisecond)
	if !ok {
		t.Errorf("zombies in PID 1's namespace: %v", zombies)
	}
}

// Processes lists, as "pid (comm) STATE", the processes of the PID namespace of the host
// process init, as the host's /proc shows them.
func Processes(t testing.TB, init int) []string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", init))
	require.NoError(t, err)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, p := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		st, err := procstat.Read(pid)
		if err != nil {
			continue
		}
		if link, err := os.Readlink(filepath.Join(filepath.Dir(p), "ns/pid")); err == nil && link == ns {
			out = append(out, fmt.Sprintf("%d (%s) %c", st.PID, st.Comm, st.State))
		}
	}
	return out
}
