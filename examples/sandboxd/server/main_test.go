package server

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// roleEnv makes the test binary run sandboxd's Main with its arguments.
const roleEnv = "SANDBOXD_TEST_MAIN"

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	if os.Getenv(roleEnv) != "" {
		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
