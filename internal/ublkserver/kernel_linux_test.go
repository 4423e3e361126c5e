//go:build linux

package ublkserver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/vmtest"
)

// The two kernel behaviours a teardown fallback must bound, pinned on the
// real driver: STOP_DEV waits for requests the daemon holds, and DEL_DEV
// waits for the daemon to close /dev/ublkcN.

// holdRead reads block 0 of /dev/ublkbN in a loop until a read stays in
// flight (a daemon freezes on a signal it handles asynchronously), and
// returns a channel that gets the held read's error once it completes.
func holdRead(t *testing.T, id int) <-chan error {
	t.Helper()
	read := make(chan error, 1)
	buf := alignedBuffer(t, 4096)
	f, err := os.OpenFile(fmt.Sprintf("/dev/ublkb%d", id), os.O_RDONLY|unix.O_DIRECT, 0)
	require.NoError(t, err)
	var held atomic.Bool
	var started atomic.Int64 // when the pending read began (UnixNano); 0 between reads
	go func() {
		defer f.Close()
		for {
			started.Store(time.Now().UnixNano())
			_, err := f.ReadAt(buf, 0)
			started.Store(0)
			if err != nil || held.Load() {
				read <- err
				return
			}
		}
	}()
	// The daemon freezes asynchronously after its signal: a read it still
	// answers shows in inflight too. Only a read pending for a while is one
	// the frozen daemon holds.
	inflight := fmt.Sprintf("/sys/block/ublkb%d/inflight", id)
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(inflight)
		s := started.Load()
		return err == nil && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("0 ")) &&
			s != 0 && time.Since(time.Unix(0, s)) > 200*time.Millisecond
	}, 10*time.Second, time.Millisecond, "read held in flight")
	held.Store(true) // the read in flight is the last one
	return read
}

func TestGuestKernelStopDevWaitsForHeldRequests(t *testing.T) {
	vmtest.GuestOnly(t)
	d := startDaemon(t, DaemonConfig{Mode: Hung})
	id := d.Devices[0]
	require.NoError(t, d.Cmd.Process.Signal(unix.SIGTERM)) // hung: freezes
	read := holdRead(t, id)

	ctl, err := openControl()
	require.NoError(t, err)
	defer ctl.Close()
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err = ctl.stopDev(short, uint32(id))
	require.ErrorIs(t, err, context.DeadlineExceeded, "STOP_DEV must still be waiting for the held read")
	// The disk has already left sysfs (del_gendisk unregisters it before it
	// waits for the requests), yet the device is still LIVE with a request
	// in flight: a vanished /sys/block/ublkbN does not make a kill safe.
	assert.False(t, exists(fmt.Sprintf("/sys/block/ublkb%d", id)), "disk left /sys/block while STOP_DEV waits")
	info, err := ctl.devInfo(t.Context(), uint32(id))
	require.NoError(t, err)
	assert.Equal(t, uint16(stateLive), info.State, "driver state while STOP_DEV waits")
	assert.True(t, exists(fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id)))

	// Once the daemon answers, the abandoned STOP_DEV finishes by itself.
	require.NoError(t, d.Cmd.Process.Signal(SignalThaw))
	require.NoError(t, <-read)
	require.Eventually(t, func() bool { return !exists(fmt.Sprintf("/sys/block/ublkb%d", id)) },
		10*time.Second, 10*time.Millisecond, "disk removed by the earlier STOP_DEV")

	// DEL_DEV now waits for the hung daemon to let go of /dev/ublkcN.
	short2, cancel2 := context.WithTimeout(t.Context(), time.Second)
	defer cancel2()
	err = ctl.delDev(short2, uint32(id))
	require.ErrorIs(t, err, context.DeadlineExceeded, "DEL_DEV must wait while the daemon holds /dev/ublkcN")
	require.NoError(t, d.Cmd.Process.Kill()) // safe: no device is live
	_ = waitExit(t, d)
	assert.Eventually(t, func() bool { return !exists(fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id)) },
		10*time.Second, 10*time.Millisecond, "the abandoned DEL_DEV completes once the daemon is gone")
	ctx, cancel3 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel3()
	require.NoError(t, ctl.delDev(ctx, uint32(id)), "DEL_DEV of a deleted device is done (ENODEV)")
	noKernelProblems(t)
}
