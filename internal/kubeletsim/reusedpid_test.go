//go:build linux

package kubeletsim

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// Fault (the kill leftovers review): Kill SIGKILLed the process group -PID after the
// container's kill, also once the child had exited and was reaped; its PID was free
// then, and a process given it since that leads a process group of its own (another
// container's main process, a shell, a daemon) was SIGKILLed, a process of no
// container of the child's. On this machine, a child's container a cgroup of its own
// (each layout) or its process group alone:
//
//	the child exits, reaped
//	another process, a group leader, started with its PID (ns_last_pid)
//	Kill:  before, that process SIGKILLed
//	       now, untouched; Kill returns nil (nothing of the child is left)
func TestKillAfterTheChildWasReapedLeavesAProcessGivenItsPIDAlone(t *testing.T) {
	layouts := []struct {
		name string
		hs   func(t *testing.T) []hierarchy
	}{
		{"its process group alone", func(*testing.T) []hierarchy { return nil }},
	}
	for _, layout := range containerLayouts {
		layouts = append(layouts, struct {
			name string
			hs   func(t *testing.T) []hierarchy
		}{layout.name, func(t *testing.T) []hierarchy {
			h := machineHierarchy(t, layout.v2)
			h.freeze = layout.freeze
			return []hierarchy{h}
		}})
	}
	for _, layout := range layouts {
		t.Run(layout.name, func(t *testing.T) {
			child, other := reapedChildAndItsPID(t, layout.hs(t))
			require.NoError(t, child.Kill())
			// A signal is generated when kill returns, and SIGKILL's fate is sealed then:
			// a SIGTERM sent after it ends the process only if no SIGKILL came first.
			require.NoError(t, other.Process.Signal(syscall.SIGTERM))
			_ = other.Wait()
			status := other.ProcessState.Sys().(syscall.WaitStatus)
			assert.Equal(t, syscall.SIGTERM, status.Signal(), "the process given the reaped child's PID was not SIGKILLed")
		})
	}
}

// reapedChildAndItsPID starts a child in a container in hs, which exits and is reaped,
// and then another process with its PID; a process of the machine may take that PID
// first, and it starts again.
func reapedChildAndItsPID(t *testing.T, hs []hierarchy) (*Child, *exec.Cmd) {
	t.Helper()
	for range 20 {
		child, err := start(exec.Command("true"), hs)
		require.NoError(t, err)
		<-child.Exited()
		require.NoError(t, child.Err())
		if other := startWithPID(t, child.Cmd.Process.Pid); other != nil {
			return child, other
		}
	}
	require.FailNow(t, "the PIDs of 20 reaped children were all taken by other processes first")
	return nil, nil
}

// startWithPID starts a process that leads a process group of its own (sleep, as another
// container's main process) with PID pid, free now: the kernel's next PID set to it
// (ns_last_pid, root's). It returns nil when another process of the machine holds pid.
// The test's cleanup kills it if the test did not wait for it.
func startWithPID(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "root, to give a process a PID of its choosing (/proc/sys/kernel/ns_last_pid)")
	}
	for range 100 {
		require.NoError(t, os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0))
		cmd := exec.Command("sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		if cmd.Process.Pid == pid {
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			return cmd
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			return nil // another process has it
		}
	}
	return nil
}
