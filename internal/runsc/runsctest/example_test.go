//go:build linux

package runsctest_test

import (
	"path/filepath"
	"testing"

	"github.com/drainkit/drainkit/internal/runsc/runsctest"
)

// A test that checkpoints onto a full images volume gives the sandboxes' images
// directory one of 4 KiB; one without root is skipped, saying so.
func ExampleImagesVolume() {
	fullVolume := func(t *testing.T, stateDir string) {
		runsctest.ImagesVolume(t, filepath.Join(stateDir, "images"), 0, "size=4k", "a small images volume")
		// ... checkpoint a sandbox: "no space left on device"
	}
	_ = fullVolume
	// Output:
}
