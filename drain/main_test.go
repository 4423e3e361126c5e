package drain

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// TestMain runs the tests, or, when the end-to-end test re-executes this
// binary, one of its helper processes (see e2e_test.go).
func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon() // the end-to-end server's device daemon
	switch role := os.Getenv(e2eRoleEnv); role {
	case "":
		goleak.VerifyTestMain(m)
	default:
		os.Exit(runE2ERole(role))
	}
}
