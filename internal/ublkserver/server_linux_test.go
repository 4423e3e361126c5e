//go:build linux

package ublkserver

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/vmtest"
)

func TestInVM(t *testing.T) {
	// Two CPUs, so that a device can have two hardware queues.
	vmtest.RunGuestTests(t, vmtest.Config{Run: "^TestGuest", Modules: []string{"ublk_drv"}, CPUs: 2})
}

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	require.NoError(t, err)
	return s
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestGuestServesReadsAndWritesAndStopsCleanly writes random data through
// /dev/ublkb0 with O_DIRECT (so every byte goes through the queues), reads
// it back, and stops the server in the safe order: both sysfs entries and
// both device nodes must be gone, and the backing file holds the data.
func TestGuestServesReadsAndWritesAndStopsCleanly(t *testing.T) {
	vmtest.GuestOnly(t)
	dir := t.TempDir()
	s := startServer(t, Config{Size: 8 << 20, BackingDir: dir})
	require.Len(t, s.Devices(), 1)
	id := s.Devices()[0]
	blk := fmt.Sprintf("/dev/ublkb%d", id)
	for _, p := range []string{blk, fmt.Sprintf("/dev/ublkc%d", id),
		fmt.Sprintf("/sys/block/ublkb%d", id), fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id)} {
		assert.True(t, exists(p), "%s exists while the device is live", p)
	}

	want := make([]byte, 1<<20) // larger than MaxIOBytes: split into several requests
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	f, err := os.OpenFile(blk, os.O_RDWR|unix.O_DIRECT, 0)
	require.NoError(t, err)
	buf := alignedBuffer(t, len(want))
	copy(buf, want)
	n, err := f.WriteAt(buf, 3<<20)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	clear(buf)
	n, err = f.ReadAt(buf, 3<<20)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	assert.True(t, bytes.Equal(want, buf), "data read back differs from data written")
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
	<-s.Done()
	for _, p := range []string{blk, fmt.Sprintf("/sys/block/ublkb%d", id), fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id)} {
		assert.False(t, exists(p), "%s is gone after Stop", p)
	}
	disk, err := os.ReadFile(BackingFile(dir, id))
	require.NoError(t, err)
	require.Len(t, disk, 8<<20)
	assert.True(t, bytes.Equal(want, disk[3<<20:4<<20]), "backing file holds the written data")
}

// TestGuestServesTwoQueues checks the second queue's descriptor mapping
// and thread: I/O from both CPUs lands on both queues, and every block
// written from either reads back.
func TestGuestServesTwoQueues(t *testing.T) {
	vmtest.GuestOnly(t)
	require.GreaterOrEqual(t, runtime.NumCPU(), 2, "the guest needs two CPUs")
	s := startServer(t, Config{Size: 8 << 20, Queues: 2, Depth: 8})
	id := s.Devices()[0]
	mq, err := os.ReadDir(fmt.Sprintf("/sys/block/ublkb%d/mq", id))
	require.NoError(t, err)
	assert.Len(t, mq, 2, "two hardware queues")

	f, err := os.OpenFile(fmt.Sprintf("/dev/ublkb%d", id), os.O_RDWR|unix.O_DIRECT, 0)
	require.NoError(t, err)
	defer f.Close()
	errs := make(chan error, 2)
	for cpu := range 2 {
		buf := alignedBuffer(t, 64<<10)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs <- err
				return
			}
			for i := range 16 {
				off := int64(cpu)<<22 + int64(i)<<16
				for j := range buf {
					buf[j] = byte(int(off>>16) + j)
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	got := alignedBuffer(t, 64<<10)
	for cpu := range 2 {
		for i := range 16 {
			off := int64(cpu)<<22 + int64(i)<<16
			_, err := f.ReadAt(got, off)
			require.NoError(t, err)
			for j := range got {
				if got[j] != byte(int(off>>16)+j) {
					t.Fatalf("byte %d of block at %d: got %d", j, off, got[j])
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, f.Close())
	require.NoError(t, s.Stop(ctx))
}

// TestGuestFreezeHoldsIOUntilThaw checks that a frozen server keeps a
// request in flight (visible in /sys/block/ublkbN/inflight), logs it held,
// and answers it on thaw.
func TestGuestFreezeHoldsIOUntilThaw(t *testing.T) {
	vmtest.GuestOnly(t)
	events := filepath.Join(t.TempDir(), "events")
	s := startServer(t, Config{Size: 4 << 20, EventLog: events})
	id := s.Devices()[0]
	s.Freeze()
	read := make(chan error, 1)
	buf := alignedBuffer(t, 4096)
	go func() {
		f, err := os.OpenFile(fmt.Sprintf("/dev/ublkb%d", id), os.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			read <- err
			return
		}
		defer f.Close()
		_, err = f.ReadAt(buf, 0)
		read <- err
	}()
	inflight := fmt.Sprintf("/sys/block/ublkb%d/inflight", id)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(inflight)
		return err == nil && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("0 "))
	}, 10*time.Second, 10*time.Millisecond, "a read is in flight while frozen")
	select {
	case err := <-read:
		t.Fatalf("read completed while frozen: %v", err)
	default:
	}
	var ev []Event
	require.Eventually(t, func() bool {
		ev, _ = ReadEvents(events)
		_, held := First(ev, EventHeldRead, id)
		return held
	}, 10*time.Second, 10*time.Millisecond, "the held read is logged")
	_, wrote := First(ev, EventHeldWrite, id)
	assert.False(t, wrote, "no write was issued: %v", ev)
	s.Thaw()
	require.NoError(t, <-read)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}

// alignedBuffer returns n bytes aligned for O_DIRECT.
func alignedBuffer(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}
