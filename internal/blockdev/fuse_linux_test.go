//go:build linux

package blockdev_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
)

// stuckFS is a FUSE file system served by this process, holding one
// regular file, "f". Once Hang is called it stops answering GETATTR for
// that file, as a FUSE (or NFS) server that is gone does: a stat of the
// file that needs fresh attributes then waits in the kernel until the
// connection is aborted, which the test's end does.
type stuckFS struct {
	Dir  string // the mount point
	dev  *os.File
	hang atomic.Bool
	wg   sync.WaitGroup
}

// FUSE protocol (include/uapi/linux/fuse.h), the few parts this server needs.
const (
	fuseLookup  = 1
	fuseForget  = 2
	fuseGetattr = 3
	fuseOpen    = 14
	fuseRelease = 18
	fuseFlush   = 25
	fuseInit    = 26
	fuseIntr    = 36
	fuseBForget = 42

	fuseInHeader  = 40
	fuseOutHeader = 16
	fuseAttrSize  = 88
	fileNode      = 2
)

// mountStuckFS mounts a stuckFS on a new directory, or skips the test when
// this machine cannot (not root, no /dev/fuse); under CI=true it fails then.
func mountStuckFS(t *testing.T) *stuckFS {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		realpart.Missing(t, fmt.Sprintf(format, args...))
	}
	if os.Geteuid() != 0 {
		skip("needs root to mount a FUSE file system")
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		skip("no FUSE here: %v", err)
	}
	dir := t.TempDir()
	opts := "fd=" + strconv.Itoa(fd) + ",rootmode=40000,user_id=0,group_id=0"
	if err := unix.Mount("drainkit-stuck", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		skip("cannot mount FUSE here: %v", err)
	}
	// Only now, with the connection made, does the device poll: given to
	// the poller, its reads wait there, and Close ends them and aborts the
	// connection.
	require.NoError(t, unix.SetNonblock(fd, true))
	fs := &stuckFS{Dir: dir, dev: os.NewFile(uintptr(fd), "/dev/fuse")}
	fs.wg.Go(fs.serve)
	t.Cleanup(func() {
		// Closing the device aborts the connection: every request still
		// waiting for an answer fails (ENOTCONN), and the server's read ends.
		fs.dev.Close()
		fs.wg.Wait()
		require.NoError(t, unix.Unmount(fs.Dir, unix.MNT_DETACH))
	})
	return fs
}

// Hang makes the server stop answering GETATTR for the file.
func (fs *stuckFS) Hang() { fs.hang.Store(true) }

func (fs *stuckFS) serve() {
	buf := make([]byte, 1<<17)
	ne := binary.NativeEndian
	for {
		n, err := fs.dev.Read(buf)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
			continue // a request interrupted before it was read
		}
		if err != nil || n < fuseInHeader {
			return
		}
		in := buf[:n]
		op, unique, node := ne.Uint32(in[4:]), ne.Uint64(in[8:]), ne.Uint64(in[16:])
		var out []byte
		errno := int32(0)
		switch op {
		case fuseForget, fuseBForget, fuseIntr:
			continue // no answer expected
		case fuseInit:
			out = make([]byte, 64)
			ne.PutUint32(out[0:], 7)                  // major
			ne.PutUint32(out[4:], 31)                 // minor
			ne.PutUint32(out[8:], ne.Uint32(in[48:])) // max_readahead
			ne.PutUint32(out[20:], 4096)              // max_write
			ne.PutUint32(out[24:], 1)                 // time_gran
		case fuseLookup:
			if name := string(in[fuseInHeader : n-1]); node != 1 || name != "f" {
				errno = -int32(unix.ENOENT)
				break
			}
			out = make([]byte, 40+fuseAttrSize) // fuse_entry_out, nothing cached
			ne.PutUint64(out[0:], fileNode)
			attr(out[40:], fileNode)
		case fuseGetattr:
			if node == fileNode && fs.hang.Load() {
				continue // gone: the stat waits
			}
			out = make([]byte, 16+fuseAttrSize) // fuse_attr_out, nothing cached
			attr(out[16:], node)
		case fuseOpen:
			out = make([]byte, 16)
			// FOPEN_NOFLUSH: a close needs no answer, so that a process
			// that dies with the file open does not wait for its own server.
			ne.PutUint32(out[8:], 1<<5)
		case fuseFlush, fuseRelease:
		default:
			errno = -int32(unix.ENOSYS)
		}
		reply := make([]byte, fuseOutHeader+len(out))
		ne.PutUint32(reply[0:], uint32(len(reply)))
		ne.PutUint32(reply[4:], uint32(errno))
		ne.PutUint64(reply[8:], unique)
		copy(reply[fuseOutHeader:], out)
		if _, err := fs.dev.Write(reply); err != nil && !errors.Is(err, unix.ENOENT) {
			return
		}
	}
}

// attr fills struct fuse_attr: the root directory, or the regular file.
func attr(b []byte, node uint64) {
	ne := binary.NativeEndian
	ne.PutUint64(b[0:], node) // ino
	mode, nlink := uint32(unix.S_IFDIR|0o755), uint32(2)
	if node == fileNode {
		mode, nlink = unix.S_IFREG|0o644, 1
	}
	ne.PutUint32(b[60:], mode)
	ne.PutUint32(b[64:], nlink)
	ne.PutUint32(b[80:], 4096) // blksize
}
