package loopdev

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// possibleHoldersLock is the file whose flock LockPossibleHolders takes:
// one per machine, as the processes it guards are.
var possibleHoldersLock = filepath.Join(os.TempDir(), "drainkit-possible-holders.lock")

// LockPossibleHolders takes, until t ends, the machine's lock on possible
// holders, waiting for it as long as another test holds it. Two kinds of
// test take it, so that neither meets the other across the packages that
// go test runs at once: one that starts a process whose registered files
// the scan cannot read (RingLocked, RingMapped: a possible holder of every
// device, its own test's or not), and one whose last resort acts on the
// real /proc's possible holders (it would kill such a process, in the same
// cgroup as every test, and fail both tests). RingLocked and RingMapped
// take it themselves.
func LockPossibleHolders(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(possibleHoldersLock, os.O_RDWR|os.O_CREATE, 0o666)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() }) // the flock goes with the file
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	require.NoError(t, err, "flock %s", possibleHoldersLock)
}
