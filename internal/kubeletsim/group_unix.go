//go:build unix

package kubeletsim

import "syscall"

// inOwnProcessGroup makes attr start its process in a process group of its own, which is
// the container where there is no cgroup, and returns attr.
func inOwnProcessGroup(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	attr.Setpgid = true
	return attr
}

// killProcessGroup SIGKILLs the process group pgid.
func killProcessGroup(pgid int) error { return syscall.Kill(-pgid, syscall.SIGKILL) }
