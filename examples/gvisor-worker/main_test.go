//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// roleEnv makes the test binary run the worker's Main with its arguments.
const roleEnv = "GVISOR_WORKER_TEST_MAIN"

// holdStartEnv names a file: the worker's start, once its sandboxes are loaded, says so
// in FILE.held and waits until FILE exists.
const holdStartEnv = "GVISOR_WORKER_TEST_HOLD_START"

// The tests that call t.Parallel run the fake runtime and spend their time waiting on its
// timers (a fake checkpoint's latency in a drain), not the CPU: they run after the others,
// -parallel (GOMAXPROCS) at a time. Those on real runsc stay serial: their drains' windows
// past the preserve deadline are a second or two, and a sandbox another test started
// (runsc run is CPU-bound) in one of them, at load 12, left the escalation of
// TestSandboxWhoseClientCheckpointFailsAfterThePreserveDeadlineIsSignalledThen 0.9 s where
// it has 1.3 s: SIGKILL, not SIGTERM, ended the sandbox.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) != "" {
		if err := pid1test.MountProc(); err != nil {
			fmt.Fprintln(os.Stderr, "mounting /proc:", err)
			os.Exit(1)
		}
		pid1.Init() // as main does
		if gate := os.Getenv(holdStartEnv); gate != "" {
			startingHook = func() { startsigtest.Hold(gate) }
		}
		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// waitSocket waits until the worker started with stderr listens on its Unix socket sock:
// until sock exists, which is when the worker accepts connections on it (listenUnix). A
// socket a killed worker left would read as ready: sock's directory must have none.
func waitSocket(t *testing.T, sock string, stderr fmt.Stringer) {
	t.Helper()
	require.Eventually(t, func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, 30*time.Second, 10*time.Millisecond, "worker did not start: %s", stderr)
}

// dial connects a Client to the worker's socket.
func dial(t *testing.T, socket string) *Client {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return NewClient(cc)
}
