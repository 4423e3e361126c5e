//go:build !unix

package kubeletsim

import (
	"os"
	"syscall"
)

// inOwnProcessGroup returns attr as it is: there are no process groups outside Unix, and
// the container is the process alone.
func inOwnProcessGroup(attr *syscall.SysProcAttr) *syscall.SysProcAttr { return attr }

// killProcessGroup kills the process pid, the leader of its group where there are groups:
// there are none outside Unix, and what the process started is not killed with it.
func killProcessGroup(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
