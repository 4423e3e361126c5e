//go:build linux

package blockdev_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

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

func TestHoldersFindsProcessHoldingLoopDevice(t *testing.T) {
	node, dev := attachLoop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd, stdin := startHolder(t, node)
	hs, err := blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	var mine []blockdev.Holder
	for _, h := range hs {
		if h.PID == cmd.Process.Pid {
			mine = append(mine, h)
		}
	}
	require.Len(t, mine, 1, "holders: %v", hs)
	assert.Equal(t, blockdev.FD, mine[0].Kind)
	assert.Contains(t, mine[0].Detail, node)
	assert.NotEmpty(t, mine[0].Comm)

	stdin.Close()
	require.NoError(t, cmd.Wait())
	hs, err = blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	for _, h := range hs { // udev may probe the new device; the exited child must be gone
		assert.NotEqual(t, cmd.Process.Pid, h.PID, "holder still reported after it exited: %v", h)
	}
}

func TestHoldersReadsMountinfoAndSwaps(t *testing.T) {
	node, dev := attachLoop(t)
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "42"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "comm"), []byte("qemu\n"), 0o644))
	mi := fmt.Sprintf("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"+
		"36 22 %s / /mnt/guest\\040disk rw,relatime - ext4 %s rw\n", dev, node)
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "mountinfo"), []byte(mi), 0o644))
	swaps := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" + node + "\tpartition\t1020\t0\t-2\n"
	require.NoError(t, os.WriteFile(filepath.Join(proc, "swaps"), []byte(swaps), 0o644))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.ElementsMatch(t, []blockdev.Holder{
		{PID: 42, Comm: "qemu", Kind: blockdev.Mount, Detail: "/mnt/guest disk"},
		{Kind: blockdev.Swap, Detail: node},
	}, hs)
}

func TestHoldersStopsAtContextEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := blockdev.Holders(ctx, "/proc", blockdev.DevNum{Major: 7, Minor: 0})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestHoldersIgnoresOtherDevices(t *testing.T) {
	hs, err := blockdev.Holders(context.Background(), "/proc", blockdev.DevNum{Major: 4095, Minor: 1048575})
	require.NoError(t, err)
	assert.Empty(t, hs)
}
