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
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// roleEnv makes the test binary run sandboxd's Main with its arguments.
const roleEnv = "SANDBOXD_TEST_MAIN"

// holdStartEnv names a file: sandboxd's New, once its device daemon runs, says so in
// FILE.held and waits until FILE exists.
const holdStartEnv = "SANDBOXD_TEST_HOLD_START"

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	if os.Getenv(roleEnv) != "" {
		if err := pid1test.MountProc(); err != nil {
			fmt.Fprintln(os.Stderr, "mounting /proc:", err)
			os.Exit(1)
		}
		pid1.Init() // as sandboxd's main does
		if gate := os.Getenv(holdStartEnv); gate != "" {
			startingHook = func() { startsigtest.Hold(gate) }
		}
		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
