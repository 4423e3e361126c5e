//go:build linux

package kubeletsim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// procMounted mounts the /proc of the new PID namespace in the child's
// mount namespace, then becomes the command, which stays PID 1 ($0 is its
// path, "$@" its arguments): what a container runtime does before it
// starts a container's command, so that /proc/self, /proc/1 and every
// PID the command reads from /proc are its namespace's, as the PIDs it
// gets from the kernel are.
const procMounted = `mount -t proc proc /proc && exec "$0" "$@"`

// shell runs procMounted: the one program every Linux machine has that
// can mount and then exec in the same process.
const shell = "/bin/sh"

// pidNamespaceErr is why a child cannot be PID 1 of a PID namespace of its
// own here, nil when it can: a child started so once, with the /proc of its
// namespace mounted, and exited 0.
var pidNamespaceErr = sync.OnceValue(func() error {
	probe := exec.Command(shell, "-c", procMounted, "/bin/true")
	probe.SysProcAttr = inNewPIDNamespace(&syscall.SysProcAttr{})
	if out, err := probe.CombinedOutput(); err != nil {
		return fmt.Errorf("kubeletsim: a child cannot be PID 1 of a PID namespace of its own here (root, CAP_SYS_ADMIN, needed): %w: %s",
			err, strings.TrimSpace(string(out)))
	}
	return nil
})

// PIDNamespace returns why Start cannot run a child as PID 1 of a PID
// namespace of its own, as a pod's container runs, on this machine; nil
// when it can. Where it cannot (not root), Start runs a plain child.
func PIDNamespace() error { return pidNamespaceErr() }

// inNewPIDNamespace adds to attr a new PID namespace, and a new mount
// namespace in which /proc can be that PID namespace's; os/exec makes the
// mounts of the new one private, so the mount of /proc stays in it.
func inNewPIDNamespace(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	attr.Cloneflags |= syscall.CLONE_NEWPID
	attr.Unshareflags |= syscall.CLONE_NEWNS
	return attr
}

// asPID1 makes cmd start as PID 1 of a PID namespace of its own, with that
// namespace's /proc, where this machine allows it (PIDNamespace); it
// reports whether it does. The process started is the shell, which mounts
// /proc and execs cmd's program in its place: the same PID, the
// namespace's 1. A program that is not there fails the start, as it did.
func asPID1(cmd *exec.Cmd) (bool, error) {
	if PIDNamespace() != nil {
		return false, nil
	}
	if cmd.Err != nil {
		return false, cmd.Err
	}
	path := cmd.Path
	if !strings.Contains(path, "/") {
		path = "./" + path // as os/exec runs it: from Dir, never from $PATH
	}
	if err := executable(path, cmd.Dir); err != nil {
		return false, err
	}
	cmd.Args = append([]string{shell, "-c", procMounted, path}, cmd.Args[1:]...)
	cmd.Path = shell
	inNewPIDNamespace(cmd.SysProcAttr)
	return true, nil
}

// executable reports why the program at path, relative to dir when it is
// relative, cannot be run, as os/exec's start would have: nil when it can.
func executable(path, dir string) error {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("kubeletsim: %w", err)
	case st.IsDir() || st.Mode()&0o111 == 0:
		return fmt.Errorf("kubeletsim: %s: %w", path, os.ErrPermission)
	}
	return nil
}
