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
// Its child is a possible holder of every device: RingMapped holds
// LockPossibleHolders until the test ends.
func RingMapped(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	needRing(t)
	LockPossibleHolders(t)
	return start(t, EnvRingMapped, node)
}

// EnvRingLocked is the environment variable that makes MainIfHolder, in
// the test binary RingLocked re-executes, hold the block device it names
// through an io_uring whose lock it keeps.
const EnvRingLocked = "DRAINKIT_LOOPDEV_RING_LOCKED"

// LockedRing is a child of RingLocked.
type LockedRing struct {
	Cmd   *exec.Cmd
	Stdin io.WriteCloser // closing it lets the child exit
	out   *bufio.Reader
}

// RingLocked is Ring whose ring is then kept busy: the child calls
// io_uring_register (IORING_REGISTER_FILES_UPDATE) with its table of fds
// on a page of a userfaultfd that it does not serve, so the kernel holds
// the ring's lock, waiting in the copy from user space, until Unlock (the
// child then serves the fault with "skip" entries, and the call ends with
// slot 0 unchanged) or the child's exit (a fatal signal ends the wait). A
// read of the ring's fdinfo never gets the lock meanwhile: the kernel lists
// none of its registered files (since Linux 6.15 nothing of the ring),
// whatever the retries, as for a ring that some task keeps locked.
// RingLocked returns once the call waits on the fault. Where
// userfaultfd cannot catch the kernel's own faults (it needs
// CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd) the part is missing.
// Its child is a possible holder of every device: RingLocked holds
// LockPossibleHolders until the test ends.
func RingLocked(t testing.TB, node string) *LockedRing {
	t.Helper()
	needRing(t)
	needUserfaultfd(t)
	LockPossibleHolders(t)
	cmd, stdin, out := startReading(t, EnvRingLocked, node)
	return &LockedRing{Cmd: cmd, Stdin: stdin, out: out}
}

// Unlock lets the child's io_uring_register end, and returns once it has:
// the ring's lock is free, and its fdinfo lists the device again.
func (l *LockedRing) Unlock(t testing.TB) {
	t.Helper()
	_, err := io.WriteString(l.Stdin, "unlock\n")
	require.NoError(t, err)
	line, err := l.out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "unlocked\n", line)
}

func start(t testing.TB, env, node string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd, stdin, _ := startReading(t, env, node)
	return cmd, stdin
}

// startReading is start that also returns the child's stdout after its
// "ready" line.
func startReading(t testing.TB, env, node string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+node)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return cmd, stdin, out
}

// MainIfHolder plays the holder (Hold's, Map's, Ring's, RingMapped's or
// RingLocked's) and exits the process when EnvHold, EnvMap, EnvRing,
// EnvRingMapped or EnvRingLocked is set, and returns at once otherwise. Call it first in TestMain of any test
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
	if node := os.Getenv(EnvRingLocked); node != "" {
		os.Exit(holdRingLocked(node))
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
