package server

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
)

// roleEnv makes the test binary run sandboxd's Main with its arguments.
const roleEnv = "SANDBOXD_TEST_MAIN"

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	if os.Getenv(roleEnv) != "" {
		if err := pid1test.MountProc(); err != nil {
			fmt.Fprintln(os.Stderr, "mounting /proc:", err)
			os.Exit(1)
		}
		pid1.Init() // as sandboxd's main does
		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
