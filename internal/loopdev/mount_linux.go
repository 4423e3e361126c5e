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

// MountedWithJournal is Mounted for a file system of type fstype whose
// journal is on a loop device of its own: ext4's (mke2fs -O journal_dev,
// then -J device=) or xfs's log (mkfs.xfs -l logdev=, mounted with
// logdev=). The journal's device is held by the file system in the
// kernel, though no sysfs holders/ lists it and mountinfo names only the
// file system's own device (xfs names the log's among its options). It
// returns the journal's device node, its number and the mount point. No
// mkfs for fstype, or no loop device, is a missing part.
func MountedWithJournal(t testing.TB, fstype string) (journal string, dev blockdev.DevNum, dir string) {
	t.Helper()
	var mkfs string
	var size int64 = 64 << 20
	switch fstype {
	case "ext4":
		mkfs = "mke2fs"
	case "xfs":
		mkfs, size = "mkfs.xfs", 300<<20 // xfs's smallest data device; its log takes 64 MiB
	default:
		t.Fatalf("loopdev: no external journal for %s", fstype)
	}
	mkfs, err := exec.LookPath(mkfs)
	if err != nil {
		realpart.Missing(t, fmt.Sprintf("%s not found: %v", mkfs, err))
	}
	ctl := control(t)
	defer ctl.Close()
	image := func(name string) string {
		p := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		require.NoError(t, os.Truncate(p, size))
		return p
	}
	journal, dev = attach(t, ctl, image("journal.img"))
	data, _ := attach(t, ctl, image("fs.img"))
	steps := [][]string{
		{"-q", "-F", "-O", "journal_dev", "-b", "4096", journal},
		{"-q", "-F", "-t", "ext4", "-b", "4096", "-J", "device=" + journal, data},
	}
	opts := ""
	if fstype == "xfs" {
		steps = [][]string{{"-q", "-f", "-l", "logdev=" + journal + ",size=64m", data}}
		opts = "logdev=" + journal
	}
	for _, args := range steps {
		out, err := exec.Command(mkfs, args...).CombinedOutput()
		require.NoError(t, err, "%s %v: %s", mkfs, args, out)
	}
	dir = t.TempDir()
	require.NoError(t, unix.Mount(data, dir, fstype, 0, opts), "mount -t %s -o %q %s %s", fstype, opts, data, dir)
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }) // before the devices are detached
	return journal, dev, dir
}
