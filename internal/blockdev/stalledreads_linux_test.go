//go:build linux

package blockdev_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// A holder wait scans procfs again and again, each scan by its stage's
// clock. One file the scans read stalls in the kernel (here a FIFO no one
// writes: the open waits, as a mountinfo read waits for its namespace's
// lock, or a maps read for a memory-map lock a fault on a hung FUSE mount
// holds), and 20 scans run while it does:
//
//	scan 1 .. the read stalls .. its bound: cut, the read left waiting (1 thread)
//	scan 2 .. waits for that read, bounded the same: cut, no new read
//	...
//	scan 20: still the one read, the one thread asleep in the kernel
//	the stall ends .. the next scan reads the file anew and finds the hold
//
// Before, each scan started a read of its own on a thread of its own:
// 20 scans left 20 threads asleep in the kernel (a 50 s holder wait
// polling every 100 ms: about 500).
func TestScansOfAStalledFileLeaveOneReadWaiting(t *testing.T) {
	dev := blockdev.DevNum{Major: 4000, Minor: 1}
	for name, c := range map[string]struct {
		file, held string
		deadline   time.Duration // each scan's
		holder     blockdev.Holder
	}{
		"a mountinfo": {"mountinfo", "36 22 4000:1 / /mnt/disk rw - ext4 /dev/ublkb1 rw\n", 20 * time.Millisecond,
			blockdev.Holder{PID: 100, Comm: "p100", Kind: blockdev.Mount, Detail: "/mnt/disk"}},
		"a process's maps": {"maps", "7f0000000000-7f0000001000 rw-s 00000000 fa0:1 1042 /dev/ublkb1\n", time.Minute,
			blockdev.Holder{PID: 100, Comm: "p100", Kind: blockdev.Mapped, Detail: "mmap 7f0000000000-7f0000001000 /dev/ublkb1"}},
	} {
		t.Run(name, func(t *testing.T) {
			proc := t.TempDir()
			write(t, proc, "100/comm", "p100\n")
			require.NoError(t, os.MkdirAll(filepath.Join(proc, "100", "fd"), 0o755))
			if c.file == "maps" { // typed by map_files: /dev/ublkb1 is the device
				write(t, proc, "100/mountinfo", "")
				require.NoError(t, os.Symlink("/usr/bin/vmm", filepath.Join(proc, "100", "exe")))
				require.NoError(t, os.MkdirAll(filepath.Join(proc, "100", "map_files"), 0o755))
				node := filepath.Join(t.TempDir(), "ublkb1")
				require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(dev.Major, dev.Minor))))
				require.NoError(t, os.Symlink(node, filepath.Join(proc, "100", "map_files", "7f0000000000-7f0000001000")))
			}
			stalled := filepath.Join(proc, "100", c.file)
			require.NoError(t, unix.Mkfifo(stalled, 0o600))
			// The stall ends (at the test's end if not before): a writer
			// lets the waiting open through, the file is a regular one
			// from then on, and the writer's close ends the waiting read.
			stallEnded := false
			endStall := func() {
				if stallEnded {
					return
				}
				stallEnded = true
				w, err := os.OpenFile(stalled, os.O_RDWR, 0)
				require.NoError(t, err)
				write(t, proc, "100/answered", c.held)
				require.NoError(t, os.Rename(filepath.Join(proc, "100/answered"), stalled))
				require.NoError(t, w.Close())
			}
			t.Cleanup(endStall)

			for scan := 1; scan <= 20; scan++ {
				ctx, cancel := context.WithTimeout(context.Background(), c.deadline)
				found, err := blockdev.Scan(ctx, proc, []blockdev.DevNum{dev})
				cancel()
				var cut *blockdev.CutError
				if errors.As(err, &cut) {
					assert.Contains(t, cut.Unread, 100, "scan %d: process 100 not read, and said so", scan)
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				} else {
					require.NoError(t, err)
					require.Len(t, found[dev], 1, "scan %d", scan)
					assert.Equal(t, blockdev.Possible, found[dev][0].Kind, "scan %d: process 100 not read, and said so", scan)
				}
				assert.Equal(t, 1, threadsReading(t, stalled), "scan %d: threads asleep reading %s", scan, c.file)
			}
			endStall()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			found, err := blockdev.Scan(ctx, proc, []blockdev.DevNum{dev})
			require.NoError(t, err)
			assert.Equal(t, []blockdev.Holder{c.holder}, found[dev], "the stall over, the next scan reads the file anew")
			assert.Zero(t, threadsReading(t, stalled))
		})
	}
}

// threadsReading counts this process's threads asleep in the kernel in an
// open or a read of the FIFO path (its inode: the FIFO may since have
// been replaced at path), by /proc/self/task/TID/syscall and the fds of
// the reads that got past their open.
func threadsReading(t *testing.T, path string) int {
	t.Helper()
	var st unix.Stat_t
	fifoIno := uint64(0)
	if err := unix.Stat(path, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		fifoIno = st.Ino
	}
	tasks, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "syscall"))
		if err != nil {
			continue // the thread has exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue // running, or asleep outside a system call
		}
		nr, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		arg, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			continue
		}
		switch nr {
		case unix.SYS_OPENAT: // a wait for the FIFO's writer; the path is in user memory
			if fifoIno != 0 {
				n++
			}
		case unix.SYS_READ: // a read of an fd on the FIFO
			var fst unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/self/fd/%d", arg), &fst) == nil && fst.Ino == fifoIno && fifoIno != 0 {
				n++
			}
		}
	}
	return n
}
