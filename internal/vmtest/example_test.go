package vmtest_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/vmtest"
)

// An asset directory as .ci/setup-ublk-vm leaves it: the kernel, its
// release string and the ublk module.
func ExampleFindAssets() {
	dir, err := os.MkdirTemp("", "drainkit-vm")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "modules"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel image"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "release"), []byte("6.12.117+deb12-cloud-amd64\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "modules", "ublk_drv.ko"), []byte("module"), 0o644)

	// The error, if any, would say that qemu-system-x86_64 is missing;
	// what was found in the directory is filled in either way.
	a, _ := vmtest.FindAssets(dir)
	mod, err := a.Module("ublk_drv")
	fmt.Println(a.Release, filepath.Base(a.Kernel), filepath.Base(mod), err)
	_, err = a.Module("null_blk")
	fmt.Println(err != nil)
	// Output:
	// 6.12.117+deb12-cloud-amd64 vmlinuz ublk_drv.ko <nil>
	// true
}
