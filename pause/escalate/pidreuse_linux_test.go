//go:build linux

package escalate_test

import (
	"bufio"
	"context"
	"errors"
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

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/pause/escalate"
)

// pidReuseMode is the helper mode of TestCmdNeverSignalsTheProcessThatReusedItsPID,
// run as PID 1 of a PID namespace of its own.
const pidReuseMode = "pidreuse"

// Exit statuses of the pidreuse helper for a missing real part.
const (
	exitNoPIDControl = 5 // ns_last_pid cannot be written
	exitNoReuse      = 6 // the PID was never reused in ten tries
)

func init() {
	if os.Getenv(helperEnv) == pidReuseMode { // before TestMain: this process is the helper
		os.Exit(pidReuse())
	}
}

// pidReuse starts a child that exits at once and reaps it behind
// os/exec's back, as a PID-1 reaper's wait4(-1) does; then, through
// ns_last_pid, starts another child (a "trap" helper, which writes its
// state file on SIGTERM) with the same PID, and only then calls
// escalate.Cmd on the first and stops it. It prints "untouched" when the
// second child got no signal, "signalled" when it did.
func pidReuse() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	state := os.Getenv("ESCALATE_TEST_STATE")
	for range 10 {
		first := exec.Command(exe, "-test.run=^$")
		first.Env = append(os.Environ(), helperEnv+"=exit")
		if err := first.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		pid := first.Process.Pid
		if _, err := syscall.Wait4(pid, nil, 0, nil); err != nil { // the other reaper
			fmt.Println("wait4:", err)
			return 1
		}
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			fmt.Println("ns_last_pid:", err)
			return exitNoPIDControl
		}
		second := exec.Command(exe, "-test.run=^$")
		second.Env = append(os.Environ(), helperEnv+"=trap", "ESCALATE_TEST_STATE="+state)
		out, err := second.StdoutPipe()
		if err == nil {
			err = second.Start()
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			fmt.Printf("second child: %q %v\n", line, err)
			return 1
		}
		if second.Process.Pid != pid {
			_ = second.Process.Kill()
			_ = second.Wait()
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		exit, err := escalate.Policy{TermWait: time.Second, KillWait: time.Second}.Stop(ctx, escalate.Cmd(first))
		cancel()
		fmt.Printf("pid %d reused; stop: %v (%v)\n", pid, exit, err)
		if _, err := os.Stat(state); err == nil {
			fmt.Println("signalled")
		} else {
			fmt.Println("untouched")
		}
		_ = second.Process.Kill()
		_ = second.Wait()
		return 0
	}
	fmt.Println("the PID was not reused in ten tries")
	return exitNoReuse
}

// Fault: escalate.Cmd pinned its child with pidfd_open(c.Process.Pid) when
// it was called, not when the child started. A child reaped by another
// reaper before Cmd (a PID-1 server's wait4(-1) on SIGCHLD) left its PID
// free, and a process that reused it was pinned, signalled and, ignoring
// the signal, would have been SIGKILLed. Cmd holds the pidfd os/exec got
// when it made the child (CLONE_PIDFD): the reaped child reads as exited
// and the other process gets nothing. The PID is reused for real, in a
// PID namespace of the test's own, through ns_last_pid.
//
//	first child exits -> reaped by the other reaper -> second child gets its PID
//	  -> escalate.Cmd(first) -> Stop: exited, nothing signalled
func TestCmdNeverSignalsTheProcessThatReusedItsPID(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+pidReuseMode, "ESCALATE_TEST_STATE="+state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, syscall.EPERM):
		realpart.Missing(t, "a PID namespace of the test's own needs CAP_SYS_ADMIN: "+err.Error())
	case errors.As(err, &exitErr) && (exitErr.ExitCode() == exitNoPIDControl || exitErr.ExitCode() == exitNoReuse):
		realpart.Missing(t, "the PID could not be reused on purpose: "+strings.TrimSpace(string(out)))
	}
	require.NoError(t, err, string(out))
	t.Log(strings.TrimSpace(string(out)))
	assert.Contains(t, string(out), "untouched", "the process that reused the PID got no signal")
	assert.Contains(t, string(out), "stop: gone", "the reaped child is gone: Stop's signal reached no process")
}
