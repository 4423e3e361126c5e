//go:build linux

package blockdev_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// The holders of a device, from a procfs: here a fake one where process
// 42 (qemu) has a file system of device 7:3 mounted.
func ExampleHolders() {
	proc, _ := os.MkdirTemp("", "proc")
	defer os.RemoveAll(proc)
	_ = os.MkdirAll(filepath.Join(proc, "42"), 0o755)
	_ = os.WriteFile(filepath.Join(proc, "42", "comm"), []byte("qemu\n"), 0o644)
	_ = os.WriteFile(filepath.Join(proc, "42", "mountinfo"), []byte("36 22 7:3 / /mnt/guest rw - ext4 /dev/loop3 rw\n"), 0o644)

	hs, err := blockdev.Holders(context.Background(), proc, blockdev.DevNum{Major: 7, Minor: 3})
	fmt.Println(hs, err)
	// Output: [{42 qemu 0 mount /mnt/guest}] <nil>
}
