package loopdev

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// EnvHold is the environment variable that makes MainIfHolder, in the test
// binary Hold re-executes, open the block device it names.
const EnvHold = "DRAINKIT_LOOPDEV_HOLD"

// EnvMap is the environment variable that makes MainIfHolder, in the test
// binary Map re-executes, map the block device it names and close its fd.
const EnvMap = "DRAINKIT_LOOPDEV_MAP"

// Hold starts a child process that holds node open, as a VMM holds its
// disk: the test binary, re-executed with EnvHold set, which opens node,
// says "ready" and waits for its stdin to close. Hold returns once node is
// open; closing the returned writer lets the child exit, and the test's
// end closes it and reaps the child. The binary's TestMain must call
// MainIfHolder first.
func Hold(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	return start(t, EnvHold, node)
}

// Map starts a child process that holds node as a memory mapping, with no
// fd open on it: the test binary, re-executed with EnvMap set, which opens
// node, maps its first page shared, closes the fd, says "ready" and waits
// for its stdin to close. Otherwise as Hold.
func Map(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	return start(t, EnvMap, node)
}

// EnvRing is the environment variable that makes MainIfHolder, in the test
// binary Ring re-executes, register the block device it names in an
// io_uring's fixed files and close its fd.
const EnvRing = "DRAINKIT_LOOPDEV_RING"

// Ring starts a child process that holds node through an io_uring, with no
// fd open on it, as a storage client using registered files (fio's
// registerfiles, SPDK, QEMU's io_uring) does: the test binary, re-executed
// with EnvRing set, which opens node, sets up a ring, registers the fd as
// the ring's fixed file 0, closes the fd, says "ready" and waits for its
// stdin to close. Where io_uring is not available the part is missing
// (realpart.Missing). Otherwise as Hold.
func Ring(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	needRing(t)
	return start(t, EnvRing, node)
}

// EnvRingMapped is the environment variable that makes MainIfHolder, in
// the test binary RingMapped re-executes, register the block device it
// names in an io_uring's fixed files and close both fds, the ring's too.
const EnvRingMapped = "DRAINKIT_LOOPDEV_RING_MAPPED"

// RingMapped is Ring whose child also closes the ring's fd: the ring lives
// on through its memory mapping alone (as when the ring's fd was passed to
// another process, or registered with IORING_REGISTER_RING_FDS and
// closed), and the device with it, with no fd of the process on either.
func RingMapped(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	needRing(t)
	return start(t, EnvRingMapped, node)
}

func start(t testing.TB, env, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+node)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return cmd, stdin
}

// MainIfHolder plays the holder (Hold's, Map's, Ring's or RingMapped's)
// and exits the process when EnvHold, EnvMap, EnvRing or EnvRingMapped is
// set, and returns at once otherwise. Call it first in TestMain of any test
// binary that uses Hold:
//
//	func TestMain(m *testing.M) {
//		loopdev.MainIfHolder()
//		goleak.VerifyTestMain(m)
//	}
func MainIfHolder() {
	if node := os.Getenv(EnvHold); node != "" {
		os.Exit(holdOpen(node))
	}
	if node := os.Getenv(EnvMap); node != "" {
		os.Exit(holdMapped(node))
	}
	if node := os.Getenv(EnvRing); node != "" {
		os.Exit(holdRing(node, false))
	}
	if node := os.Getenv(EnvRingMapped); node != "" {
		os.Exit(holdRing(node, true))
	}
}

// holdOpen keeps node open until stdin closes.
func holdOpen(node string) int {
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer f.Close()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}
