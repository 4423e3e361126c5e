//go:build !linux

package loopdev

import "fmt"

// holdMapped is not supported on this system.
func holdMapped(node string) int {
	fmt.Println("error: mapping a block device is not supported on this system")
	return 1
}
