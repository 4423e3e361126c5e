//go:build linux

package loopdev

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

func TestMain(m *testing.M) {
	MainIfHolder()
	goleak.VerifyTestMain(m)
}

// The device is a real block device of 1 MiB whose sysfs number matches,
// and it is detached when the test ends.
func TestAttachGivesARealBlockDeviceAndDetachesIt(t *testing.T) {
	var node string
	t.Run("attached", func(t *testing.T) {
		var dev blockdev.DevNum
		node, dev = Attach(t)
		fi, err := os.Stat(node)
		require.NoError(t, err)
		assert.Equal(t, os.ModeDevice, fi.Mode()&os.ModeDevice, "a device node")
		size, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(node), "size"))
		require.NoError(t, err)
		assert.Equal(t, "2048", strings.TrimSpace(string(size)), "1 MiB in 512-byte sectors")
		want, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(node), "dev"))
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSpace(string(want)), dev.String())
	})
	if node == "" {
		t.Skip("no loop device here")
	}
	size, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(node), "size"))
	if err == nil {
		assert.Equal(t, "0", strings.TrimSpace(string(size)), "detached: no backing file")
	}
}

// The holder is another process with the device open, until its stdin
// closes; then it exits 0.
func TestHoldKeepsTheDeviceOpenInAChildUntilStdinCloses(t *testing.T) {
	node, _ := Attach(t)
	cmd, stdin := Hold(t, node)
	assert.NotEqual(t, os.Getpid(), cmd.Process.Pid)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid))
	require.NoError(t, err)
	var open bool
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", cmd.Process.Pid, fd.Name()))
		open = open || err == nil && target == node
	}
	assert.True(t, open, "the holder has %s open", node)

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "the holder exits 0 once its stdin closes")
}

// The ring holder has no fd on the node: only its ring's fd, whose fdinfo
// lists the node among the ring's registered files.
func TestRingHoldsTheDeviceWithNoFdOnIt(t *testing.T) {
	node, _ := Attach(t)
	cmd, stdin := Ring(t, node)
	dir := fmt.Sprintf("/proc/%d", cmd.Process.Pid)
	fds, err := os.ReadDir(dir + "/fd")
	require.NoError(t, err)
	var info string
	for _, fd := range fds {
		target, err := os.Readlink(dir + "/fd/" + fd.Name())
		require.NoError(t, err)
		assert.NotEqual(t, node, target, "no fd on the node")
		if target == "anon_inode:[io_uring]" {
			b, err := os.ReadFile(dir + "/fdinfo/" + fd.Name())
			require.NoError(t, err)
			info = string(b)
		}
	}
	// Since Linux 6.14 the path, before it the node's name alone.
	assert.Regexp(t, `\nUserFiles:\t1\n +0: (`+node+`|`+filepath.Base(node)+`)\n`, info)

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "the holder exits 0 once its stdin closes")
}

// The locked ring's fdinfo lists none of its registered files however
// often it is read, until Unlock; then it lists the node in slot 0 again.
func TestRingLockedHidesTheRingsFilesUntilUnlocked(t *testing.T) {
	node, _ := Attach(t)
	l := RingLocked(t, node)
	dir := fmt.Sprintf("/proc/%d", l.Cmd.Process.Pid)
	info := func() string {
		fds, err := os.ReadDir(dir + "/fd")
		require.NoError(t, err)
		for _, fd := range fds {
			if target, _ := os.Readlink(dir + "/fd/" + fd.Name()); target == "anon_inode:[io_uring]" {
				b, err := os.ReadFile(dir + "/fdinfo/" + fd.Name())
				require.NoError(t, err)
				return string(b)
			}
		}
		t.Fatal("no io_uring fd")
		return ""
	}
	listed := regexp.MustCompile(`\n +0: (` + node + `|` + filepath.Base(node) + `)\n`)
	for range 20 {
		assert.NotRegexp(t, listed, info(), "listed while the ring's lock is held")
	}
	l.Unlock(t)
	assert.Regexp(t, listed, info())

	require.NoError(t, l.Stdin.Close())
	require.NoError(t, l.Cmd.Wait(), "the holder exits 0 once its stdin closes")
}

// A test holding the lock on possible holders keeps every other taker out
// until it ends: another open of the lock file (as another test binary's)
// cannot take it meanwhile, and can the moment the test is over.
func TestPossibleHoldersLockLastsTheTest(t *testing.T) {
	machine := possibleHoldersLock // other packages' tests may hold it: this test has its own
	possibleHoldersLock = filepath.Join(t.TempDir(), "possible-holders.lock")
	defer func() { possibleHoldersLock = machine }()
	other, err := os.Create(possibleHoldersLock)
	require.NoError(t, err)
	defer other.Close()
	try := func() error { return unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB) }

	t.Run("holder", func(t *testing.T) {
		LockPossibleHolders(t)
		assert.ErrorIs(t, try(), unix.EWOULDBLOCK, "taken while the test runs")
	})
	require.NoError(t, try(), "free once it has ended")
	require.NoError(t, unix.Flock(int(other.Fd()), unix.LOCK_UN))
}
