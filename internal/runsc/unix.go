//go:build unix

package runsc

import "syscall"

// noSpaceLeft reports whether the volume of dir has no space left for an ordinary
// writer: what a save that failed for want of space leaves.
func noSpaceLeft(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Bavail == 0
}

// inOwnProcessGroup is the SysProcAttr of a command started in a process group of its own.
func inOwnProcessGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
