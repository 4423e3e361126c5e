//go:build linux

package fakeublk

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

func setPdeathsig(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// openChar makes a char device node with d's char number beside the tree
// and opens it O_PATH, which needs no driver behind the number: the fd a
// real server has on /dev/ublkcN, as procfs shows it.
func (t *Tree) openChar(d DeviceSpec) (*os.File, error) {
	dir := filepath.Join(t.Root, "dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fakeublk: %w", err)
	}
	node := filepath.Join(dir, fmt.Sprintf("ublkc%d", d.ID))
	_ = os.Remove(node)
	if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(d.CharMajor, d.CharMinor))); err != nil {
		return nil, fmt.Errorf("fakeublk: the char device node of device %d (root only): %w", d.ID, err)
	}
	fd, err := unix.Open(node, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fakeublk: %w", err)
	}
	return os.NewFile(uintptr(fd), node), nil
}
