package lastreporttest

import (
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size (a tmpfs size= option: "256k") on a new temporary
// directory and returns it; it is unmounted when the test ends. The test is skipped where
// the mount fails (not root).
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("a tmpfs of its own needs root: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}
