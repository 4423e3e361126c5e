package realpart_test

import (
	"os/exec"
	"testing"

	"github.com/drainkit/drainkit/internal/realpart"
)

// A test that needs runsc says so when it is missing: skipped here, failed
// under CI=true.
func ExampleMissing() {
	needsRunsc := func(t *testing.T) {
		if _, err := exec.LookPath("runsc"); err != nil {
			realpart.Missing(t, "runsc not found in PATH (apt-get install runsc)")
		}
		// ... the test proper, with a real runsc
	}
	_ = needsRunsc
	// Output:
}
