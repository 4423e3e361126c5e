package lastreporttest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A filled-up tmpfs has no room for one more byte.
func TestFillUpLeavesNoSpace(t *testing.T) {
	dir := Tmpfs(t, "64k")
	FillUp(t, filepath.Join(dir, "filler"))
	err := os.WriteFile(filepath.Join(dir, "one"), []byte("x"), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a byte more: %v, want ENOSPC", err)
	}
}
