package realapiserver

import (
	"os/exec"
	"syscall"
)

// neverOutliveTheTest has the kernel SIGKILL cmd's process when the test binary exits.
func neverOutliveTheTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
