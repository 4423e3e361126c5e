package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL cmd if drainsim dies first, so an interrupted run
// leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
