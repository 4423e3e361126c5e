//go:build linux

package ublk_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// The loop-device helpers of internal/blockdev's tests, for the tests of
// the step against real holders.

// Loop device ioctls (linux/loop.h).
const (
	loopSetFD      = 0x4C00
	loopClrFD      = 0x4C01
	loopCtlGetFree = 0x4C82
)

// attachLoop binds a fresh 1 MiB file to a free loop device and returns
// the device node and its number. It skips when not root or without
// /dev/loop-control.
func attachLoop(t *testing.T) (string, blockdev.DevNum) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device")
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	defer ctl.Close()
	backing := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(backing, make([]byte, 1<<20), 0o600))
	bf, err := os.OpenFile(backing, os.O_RDWR, 0)
	require.NoError(t, err)
	defer bf.Close()
	var node string
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), loopCtlGetFree)
		require.NoError(t, err, "LOOP_CTL_GET_FREE")
		node = fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(node, os.O_RDWR, 0)
		if err != nil {
			t.Skipf("free loop device %s has no usable node here: %v", node, err)
		}
		err = unix.IoctlSetInt(int(lf.Fd()), loopSetFD, int(bf.Fd()))
		lf.Close()
		if err == nil {
			break
		}
		// Another test process may have taken the same free device.
		require.ErrorIs(t, err, unix.EBUSY, "LOOP_SET_FD")
		require.Less(t, attempt, 10, "no free loop device")
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(node, os.O_RDWR, 0); err == nil {
			_ = unix.IoctlSetInt(int(f.Fd()), loopClrFD, 0)
			f.Close()
		}
	})
	dev, err := blockdev.ReadDevNum("/sys", filepath.Base(node))
	require.NoError(t, err)
	return node, dev
}

// startHolder starts a child process that holds node open; closing the
// returned writer lets it exit.
func startHolder(t *testing.T, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+node)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return cmd, stdin
}
