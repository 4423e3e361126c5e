//go:build linux

package loopdev_test

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/loopdev"
)

// A test binary that uses Hold calls MainIfHolder first in its TestMain. In
// the binary Hold re-executes, EnvHold names the device: MainIfHolder holds
// it and exits. Anywhere else (here, the test process) none of the holders'
// variables is set, and it returns at once.
func ExampleMainIfHolder() {
	loopdev.MainIfHolder()
	_, asked := os.LookupEnv(loopdev.EnvHold)
	fmt.Println("asked to hold a device:", asked)
	// Output: asked to hold a device: false
}
