//go:build linux

package ublkserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/vmtest"
)

func startDaemon(t *testing.T, cfg DaemonConfig) *Daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d, err := StartDaemon(ctx, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, d.Devices)
	t.Cleanup(func() {
		_ = d.Cmd.Process.Kill() // only reached live when a test already failed
		_ = d.Wait(context.Background())
	})
	return d
}

func waitExit(t *testing.T, d *Daemon) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := d.Wait(ctx)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "daemon did not exit")
	return err
}

func devicesGone(t *testing.T, ids []int) {
	t.Helper()
	for _, id := range ids {
		for _, p := range []string{fmt.Sprintf("/sys/block/ublkb%d", id), fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id),
			fmt.Sprintf("/dev/ublkb%d", id)} {
			assert.False(t, exists(p), "%s must be gone", p)
		}
	}
}

func noKernelProblems(t *testing.T) {
	t.Helper()
	log, err := vmtest.KernelLog()
	require.NoError(t, err)
	assert.Empty(t, vmtest.KernelProblems(log), "kernel log reports problems")
}

func TestGuestDaemonCooperativeStopsOnSIGTERM(t *testing.T) {
	vmtest.GuestOnly(t)
	events := filepath.Join(t.TempDir(), "events")
	d := startDaemon(t, DaemonConfig{Config: Config{Devices: 2, Size: 4 << 20, EventLog: events}})
	require.Len(t, d.Devices, 2)
	for _, id := range d.Devices {
		assert.True(t, exists(fmt.Sprintf("/sys/block/ublkb%d", id)))
	}
	require.NoError(t, d.Cmd.Process.Signal(unix.SIGTERM))
	require.NoError(t, waitExit(t, d))
	devicesGone(t, d.Devices)
	noKernelProblems(t)
	ev, err := ReadEvents(events)
	require.NoError(t, err)
	var kinds []string
	for _, e := range ev {
		kinds = append(kinds, fmt.Sprintf("%s %d", e.Kind, e.Device-d.Devices[0]))
	}
	assert.Equal(t, []string{"started 0", "started 1", "stopping 0", "stopping 1", "deleted 0", "deleted 1"}, kinds,
		"the safe order: both devices stopped before either is deleted")
}

func TestGuestDaemonAnswersShutdownRequest(t *testing.T) {
	vmtest.GuestOnly(t)
	sock := filepath.Join(t.TempDir(), "ublk.sock")
	d := startDaemon(t, DaemonConfig{Socket: sock})
	c, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c.Close()
	req := []byte(`{"kind":"shutdown"}`)
	require.NoError(t, binary.Write(c, binary.BigEndian, uint32(len(req))))
	_, err = c.Write(req)
	require.NoError(t, err)
	var n uint32
	require.NoError(t, binary.Read(c, binary.BigEndian, &n))
	resp := make([]byte, n)
	_, err = io.ReadFull(c, resp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":"ok"}`, string(resp))
	require.NoError(t, waitExit(t, d))
	devicesGone(t, d.Devices)
}

// TestGuestDaemonSlowServesUntilItStops checks that a slow daemon keeps its
// device serving after SIGTERM: a read issued after the signal completes
// before the daemon exits.
func TestGuestDaemonSlowServesUntilItStops(t *testing.T) {
	vmtest.GuestOnly(t)
	d := startDaemon(t, DaemonConfig{Mode: Slow, StopDelay: 2 * time.Second})
	f, err := os.OpenFile(fmt.Sprintf("/dev/ublkb%d", d.Devices[0]), os.O_RDONLY|unix.O_DIRECT, 0)
	require.NoError(t, err)
	buf := alignedBuffer(t, 4096)
	require.NoError(t, d.Cmd.Process.Signal(unix.SIGTERM))
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	select {
	case <-d.Exited():
		t.Fatal("slow daemon exited before the read it served returned")
	default:
	}
	require.NoError(t, f.Close())
	require.NoError(t, waitExit(t, d))
	devicesGone(t, d.Devices)
}

// TestGuestDaemonHungIsStoppedFromOutside drives a hung daemon the way the
// teardown step's fallback must: SIGTERM is ignored and I/O is held; once
// no request is held, STOP_DEV through /dev/ublk-control removes the disk
// from outside; then killing the daemon is safe and DEL_DEV completes.
func TestGuestDaemonHungIsStoppedFromOutside(t *testing.T) {
	vmtest.GuestOnly(t)
	d := startDaemon(t, DaemonConfig{Mode: Hung})
	id := d.Devices[0]
	require.NoError(t, d.Cmd.Process.Signal(unix.SIGTERM))

	// The daemon froze on SIGTERM: a read stays in flight.
	read := holdRead(t, id)
	select {
	case <-d.Exited():
		t.Fatal("hung daemon exited on SIGTERM")
	default:
	}
	// Let the held read finish so that nothing is in flight, then stop the
	// device from outside.
	require.NoError(t, d.Cmd.Process.Signal(SignalThaw))
	require.NoError(t, <-read)

	ctl, err := openControl()
	require.NoError(t, err)
	defer ctl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, ctl.stopDev(ctx, uint32(id)))
	info, err := ctl.devInfo(ctx, uint32(id))
	require.NoError(t, err)
	assert.Equal(t, uint16(stateDead), info.State)
	assert.False(t, exists(fmt.Sprintf("/sys/block/ublkb%d", id)), "the disk is gone after STOP_DEV")
	select {
	case <-d.Exited():
		t.Fatal("hung daemon exited after its device was stopped")
	default:
	}

	require.NoError(t, d.Cmd.Process.Kill())
	assert.Error(t, waitExit(t, d), "killed")
	require.NoError(t, ctl.delDev(ctx, uint32(id)))
	devicesGone(t, d.Devices)
	noKernelProblems(t)
}
