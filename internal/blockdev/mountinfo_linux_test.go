//go:build linux

package blockdev_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// The holders scan runs with its stage's end as ctx's deadline, 100 ms
// here. Process 100's /proc/PID/mountinfo is a read that does not end by
// then: one that stalls in the kernel (here a FIFO no one writes: the
// open waits), or a mount namespace so huge that its mountinfo reads for
// longer than the stage (here a FIFO written without end). The scan ends
// at its deadline all the same, saying which processes it did not read,
// process 100 among them: its namespace's mounts are not known. Before,
// mountinfo was read with no deadline, and the scan, and the ublk step's
// stage with it, waited for the read to end: never, here.
func TestScanStopsReadingAMountinfoAtItsDeadline(t *testing.T) {
	for name, endless := range map[string]bool{"a read that stalls": false, "a namespace of endless mounts": true} {
		t.Run(name, func(t *testing.T) {
			proc := t.TempDir()
			for _, pid := range []string{"100", "101"} {
				require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
			}
			write(t, proc, "101/mountinfo", "36 22 4000:1 / /mnt/disk rw - ext4 /dev/ublkb1 rw\n")
			mountinfoFIFO(t, filepath.Join(proc, "100", "mountinfo"), endless)

			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			type result struct {
				found map[blockdev.DevNum][]blockdev.Holder
				err   error
			}
			scanned := make(chan result, 1)
			go func() {
				found, err := blockdev.Scan(ctx, proc, []blockdev.DevNum{{Major: 4000, Minor: 1}})
				scanned <- result{found, err}
			}()
			var r result
			select {
			case r = <-scanned:
			case <-time.After(30 * time.Second):
				t.Fatal("the scan was still reading process 100's mountinfo 30 s after its 100 ms deadline")
			}
			var cut *blockdev.CutError
			require.True(t, errors.As(r.err, &cut), "the scan says what it did not read: %v", r.err)
			assert.Contains(t, cut.Unread, 100, "process 100's mounts were not read")
			assert.ErrorIs(t, r.err, context.DeadlineExceeded)
		})
	}
}

// mountinfoFIFO makes path a FIFO read as a mountinfo: with endless, one
// written mount after mount without end; without, one whose open waits
// for a writer that comes only at the test's end. Either way a read of it
// ends then, its writer closed.
func mountinfoFIFO(t *testing.T, path string, endless bool) {
	t.Helper()
	require.NoError(t, unix.Mkfifo(path, 0o644))
	if !endless {
		t.Cleanup(func() {
			// Read-write, so that the open does not wait for a reader; its
			// close leaves the FIFO no writer: the scan's read ends.
			if w, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
				_ = w.Close()
			}
		})
		return
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "%d 22 0:%d / /mnt/m%d rw - tmpfs tmpfs rw\n", 100+i, 50+i%100, i); err != nil {
				return // closed: the test is over
			}
		}
	}()
	t.Cleanup(func() {
		_ = w.Close()
		<-written
	})
}
