//go:build linux

package loopdev

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Mounted makes a file system of type fstype (mkfs.FSTYPE) on a fresh
// loop device, a sparse file of 128 MiB (btrfs's smallest), mounts it on a
// new directory, and returns the device node, its number and the mount
// point. The test's end unmounts it lazily, then detaches the device. No
// mkfs.FSTYPE, or no loop device, is a missing part (realpart.Missing).
func Mounted(t testing.TB, fstype string) (node string, dev blockdev.DevNum, dir string) {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs." + fstype)
	if err != nil {
		realpart.Missing(t, fmt.Sprintf("mkfs.%s not found: %v", fstype, err))
	}
	ctl := control(t)
	defer ctl.Close()
	backing := filepath.Join(t.TempDir(), "fs.img")
	require.NoError(t, os.WriteFile(backing, nil, 0o600))
	require.NoError(t, os.Truncate(backing, 128<<20))
	node, dev = attach(t, ctl, backing)
	out, err := exec.Command(mkfs, "-q", node).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", mkfs, node, out)
	dir = t.TempDir()
	require.NoError(t, unix.Mount(node, dir, fstype, 0, ""), "mount -t %s %s %s", fstype, node, dir)
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // before the device is detached
	return node, dev, dir
}
