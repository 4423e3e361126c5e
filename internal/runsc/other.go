//go:build !unix

package runsc

import "syscall"

// noSpaceLeft reports false outside Unix, where runsc does not run: no statfs(2) to ask.
func noSpaceLeft(string) bool { return false }

// inOwnProcessGroup is an empty SysProcAttr: there are no process groups outside Unix.
func inOwnProcessGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
