package pause

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests leave no goroutine behind, and removes
// the test binary built without the race detector, if a test built it
// (binaryWithoutRace).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBuildWithoutRace()
		os.Exit(code)
	}))
}
