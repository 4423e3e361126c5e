package fakeublk_test

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// A fake sysfs tree going through a device's life: added, stopped (the
// disk goes), deleted (the char device goes).
func ExampleTree() {
	root, _ := os.MkdirTemp("", "sys")
	defer os.RemoveAll(root)
	tree, _ := fakeublk.NewTree(root)
	_ = tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 259, Minor: 0})
	fmt.Println(tree.Devices(), tree.HasDisk(0), tree.HasChar(0))
	_ = tree.StopDevice(0)
	fmt.Println(tree.Devices(), tree.HasDisk(0), tree.HasChar(0))
	_ = tree.DeleteDevice(0)
	fmt.Println(tree.Devices())
	// Output:
	// [0] true true
	// [0] false true
	// []
}
