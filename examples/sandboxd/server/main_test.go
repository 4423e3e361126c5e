//go:build linux

package server

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// roleEnv makes the test binary run sandboxd's Main with its arguments.
const roleEnv = "SANDBOXD_TEST_MAIN"

// holdStartEnv names a file: sandboxd's New, once its device daemon runs, says so in
// FILE.held and waits until FILE exists.
const holdStartEnv = "SANDBOXD_TEST_HOLD_START"

// slowDaemonEnv is a duration: sandboxd's fake device daemon is Slow, that long before it
// stops each device and again before it deletes it.
const slowDaemonEnv = "SANDBOXD_TEST_SLOW_DAEMON"

// kernelEnv is the kernel release sandboxd's ublk step classifies instead of the running
// kernel's.
const kernelEnv = "SANDBOXD_TEST_KERNEL"

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
		if step, err := time.ParseDuration(os.Getenv(slowDaemonEnv)); err == nil {
			daemonHook = func(c *fakeublk.DaemonConfig) { c.Mode, c.Step = fakeublk.Slow, step }
		}
		if release := os.Getenv(kernelEnv); release != "" {
			ublkHook = func(h *ublkhook.Hooks) { h.KernelRelease = release }
		}
		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
