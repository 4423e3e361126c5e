//go:build linux

package runsctest

import (
	"os"
	"syscall"
	"testing"

	"github.com/drainkit/drainkit/internal/realpart"
)

// ImagesVolume mounts a tmpfs at dir, made if missing, with mount(2)'s flags and data
// ("size=4k", "size=64m,nr_inodes=1", syscall.MS_RDONLY), until t ends (a lazy unmount in
// its cleanup). Mounting needs root: where it fails, t is skipped (failed under CI=true,
// realpart.Missing) with "skipping: mounting WHAT needs root: " and the error, what
// naming the volume ("a small images volume").
func ImagesVolume(t testing.TB, dir string, flags uintptr, data, what string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, data); err != nil {
		realpart.Missing(t, "skipping: mounting "+what+" needs root: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
}
