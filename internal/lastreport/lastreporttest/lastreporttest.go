// Package lastreporttest gives the tests of a Report that cannot be written
// (internal/lastreport, and the servers that write theirs with it) a real full file
// system: a tmpfs of its own, filled up. Mounting one needs root; the test is skipped
// otherwise.
package lastreporttest

import (
	"errors"
	"os"
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

// FillUp writes the new file path until its file system has no space left; any other
// error fails the test.
func FillUp(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s up: %v", path, err)
			}
			return
		}
	}
}
