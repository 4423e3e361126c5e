//go:build !linux

package loopdev

import (
	"fmt"
	"testing"

	"github.com/drainkit/drainkit/internal/realpart"
)

// holdMapped is not supported on this system.
func holdMapped(node string) int {
	fmt.Println("error: mapping a block device is not supported on this system")
	return 1
}

// holdRing is not supported on this system.
func holdRing(node string, closeRing bool) int {
	fmt.Println("error: io_uring is not supported on this system")
	return 1
}

// needRing says the part is missing: io_uring is Linux's.
func needRing(t testing.TB) {
	t.Helper()
	realpart.Missing(t, "io_uring is Linux-only")
}

// holdRingLocked is not supported on this system.
func holdRingLocked(node string) int {
	fmt.Println("error: io_uring is not supported on this system")
	return 1
}

// needUserfaultfd says the part is missing: userfaultfd is Linux's.
func needUserfaultfd(t testing.TB) {
	t.Helper()
	realpart.Missing(t, "userfaultfd is Linux-only")
}

// LockPossibleHolders says the part is missing: the processes it guards
// hold Linux block devices.
func LockPossibleHolders(t testing.TB) {
	t.Helper()
	realpart.Missing(t, "possible holders are Linux-only")
}
