//go:build linux

package ublk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// The step is limited to ublkb0 (Config.Devices), and its daemon, hung on
// a vulnerable kernel, also serves ublkb1, live: it has /dev/ublkc1 open,
// which the driver lets only a device's server open. The control fallback
// stops ublkb0, and then no device of the step is live; but the daemon is
// not killed while it still serves a live disk, found by its open char
// devices: ublkb1 joins the Report, left live, and Stop returns an
// UnsafeError naming it. Before, the step killed the daemon with ublkb1
// live: it looked at its own devices alone.
func TestDaemonServingALiveDiskBeyondTheStepsIsNotKilled(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2)%(1<<20))
	daemon, err := FindProcess(srv.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	rep, ctl, err := stopDisk0(t, daemon, sys, srv.Pid())
	assert.Contains(t, ctl.d.Events(), "STOP_DEV 0")
	assert.False(t, rep.Daemon.Killed, "the daemon still served ublkb1")
	assertDisk1LeftLive(t, rep, err)
	assert.Contains(t, rep.Device(1).Steps[0].Result, "/dev/ublkc1 open in the daemon")
	select {
	case <-srv.Done():
		t.Fatalf("the daemon exited: signalled %v", srv.Signaled(syscall.SIGKILL))
	default:
	}
}

// TestDaemonFuncsWithItsPidServingALiveDiskIsNotKilled is the same
// timeline with the daemon behind DaemonFuncs, as a supervisor that reaps
// its own children wires it: it kills through its own handle, and gives
// the step the PID with PidFunc. The step reads that PID's fds as a
// *Process's and does not kill a daemon that still serves a live disk.
func TestDaemonFuncsWithItsPidServingALiveDiskIsNotKilled(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2+7)%(1<<20))
	var killed atomic.Bool
	daemon := DaemonFuncs{
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-srv.Done():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		KillFunc: func(context.Context) error { killed.Store(true); return syscall.Kill(srv.Pid(), syscall.SIGKILL) },
		PidFunc:  srv.Pid,
	}
	rep, _, err := stopDisk0(t, daemon, sys, srv.Pid())
	assert.False(t, killed.Load(), "the daemon still served ublkb1")
	assertDisk1LeftLive(t, rep, err)
}

// twoDiskDaemon starts a fake daemon, hung, that serves ublkb0 and ublkb1
// with their char devices open (minors from minor, unique to the test), and
// returns it with its sysfs root.
func twoDiskDaemon(t *testing.T, minor uint32) (*fakeublk.Child, string) {
	sys := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	srv, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Mode: fakeublk.Hung, EventLog: filepath.Join(t.TempDir(), "events"),
		Devices: []fakeublk.DeviceSpec{
			{ID: 0, Major: 4000, Minor: 0, CharMajor: 4091, CharMinor: minor},
			{ID: 1, Major: 4000, Minor: 1, CharMajor: 4091, CharMinor: minor + 1},
		}})
	if err != nil && os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device nodes: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, sys
}

// stopDisk0 runs the step limited to ublkb0 (Config.Devices) on a
// vulnerable kernel, with the control fallback in memory over sys and a
// procfs that shows the daemon pid alone, and returns its Report, the
// control it used and its error.
func stopDisk0(t *testing.T, daemon Daemon, sys string, pid int) (*Report, *memControl, error) {
	proc := t.TempDir()
	require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(proc, strconv.Itoa(pid))))
	tree := &fakeublk.Tree{Root: sys}
	ctl := &memControl{tree: tree, d: newMemDaemon(tree)}
	td, err := New(daemon, Config{Devices: []int{0}, Reserve: 2 * time.Second, ExitWait: time.Nanosecond,
		hooks: ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: vulnerable,
			OpenControl: func(context.Context) (ublkctl.Controller, error) { return ctl, nil }}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := td.Stop(ctx)
	t.Log(rep.String())
	return rep, ctl, err
}

// assertDisk1LeftLive asserts that the step's Report and error account
// for ublkb1, the daemon's other disk: left live, named by an UnsafeError.
func assertDisk1LeftLive(t *testing.T, rep *Report, err error) {
	t.Helper()
	var unsafe *UnsafeError
	require.ErrorAs(t, err, &unsafe)
	assert.Equal(t, []int{1}, unsafe.Devices)
	require.NotNil(t, rep.Device(1), "the Report accounts for the daemon's other disk")
	assert.Equal(t, VerdictLeftLive, rep.Device(1).Verdict)
}
