//go:build linux

package ublk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/loopdev"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

const (
	vulnerable = "6.8.0-45-generic"
	fixed      = "6.15.0"
)

// realDaemon starts a fake daemon child (devices 0 and 1 unless specs are
// given) and returns it, its sysfs root, its socket and its event log.
func realDaemon(t *testing.T, mode fakeublk.Mode, step time.Duration, specs ...fakeublk.DeviceSpec) (*fakeublk.Child, string, string, string) {
	t.Helper()
	if len(specs) == 0 {
		specs = []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0, Reads: 2}, {ID: 1, Major: 4000, Minor: 1, Writes: 3}}
	}
	sys, dir := t.TempDir(), t.TempDir()
	log, sock := filepath.Join(dir, "events"), filepath.Join(dir, "ublkd.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Devices: specs, Socket: sock, Mode: mode, Step: step, EventLog: log})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d, sys, sock, log
}

func events(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	return string(b)
}

func findProcess(t *testing.T, pid int) *ublk.Process {
	t.Helper()
	p, err := ublk.FindProcess(pid)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// newTeardown is ublk.New with an empty procfs: no holders.
// newTeardown is ublk.New of d and c; a c with no control of its own
// (NoControl, ControlPath, ublkhook's OpenControl) gets noControl.
func newTeardown(t *testing.T, d ublk.Daemon, c ublk.Config) *ublk.Teardown {
	t.Helper()
	if h := ublkhook.Get(&c); !c.NoControl && c.ControlPath == "" && h.OpenControl == nil {
		h.OpenControl = noControl
		ublkhook.Set(&c, h)
	}
	td, err := ublk.New(d, c)
	require.NoError(t, err)
	return td
}

// noControl is the control fallback of the fake devices' kernel, which has
// no control device. Left at ublk's default, a fallback or a last resort
// these tests reach when their daemon is slow (a loaded machine) opened
// the host's /dev/ublk-control, where a STOP_DEV for a fake device's ID
// stops the host's device of that ID.
func noControl(context.Context) (ublkctl.Controller, error) {
	return nil, fmt.Errorf("%w: the fake devices' kernel has no control device", ublkctl.ErrNoControl)
}

func run(t *testing.T, td *ublk.Teardown, budget time.Duration) (*ublk.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	rep, err := td.Stop(ctx)
	require.NotNil(t, rep)
	return rep, err
}

func TestRealCooperativeDaemonStopsOnSIGTERM(t *testing.T) {
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0)
	td := newTeardown(t, findProcess(t, d.Pid()), ublkhook.With(ublk.Config{}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: vulnerable}))
	rep, err := run(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	<-d.Done()
	assert.Equal(t, 0, d.ExitCode())
	assert.Contains(t, events(t, log), "sigterm\nstop 0\ndelete 0\nstop 1\ndelete 1\nexit\n")
	assert.True(t, rep.Daemon.Exited, "exit seen through the pidfd")
	assert.Equal(t, uint64(2), rep.Device(0).InflightBefore.Total())
}

func TestRealDaemonStoppedThroughItsSocket(t *testing.T) {
	d, sys, sock, log := realDaemon(t, fakeublk.Cooperative, 0)
	s := &ublk.Socket{Path: sock, Process: findProcess(t, d.Pid())}
	td := newTeardown(t, s, ublkhook.With(ublk.Config{}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: vulnerable}))
	rep, err := run(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	ev := events(t, log)
	assert.Contains(t, ev, "request shutdown\n")
	assert.NotContains(t, ev, "sigterm")
}

func TestSocketWithoutProcessWaitsForTheListenerToClose(t *testing.T) {
	d, sys, sock, _ := realDaemon(t, fakeublk.Cooperative, 0)
	s := &ublk.Socket{Path: sock}
	td := newTeardown(t, s, ublkhook.With(ublk.Config{}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: vulnerable}))
	rep, err := run(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.True(t, rep.Daemon.Exited)
	<-d.Done()
	assert.ErrorIs(t, s.Kill(context.Background()), ublk.ErrCannotKill)
}

func TestRealSlowDaemonFinishesInsideTheBudget(t *testing.T) {
	d, sys, _, _ := realDaemon(t, fakeublk.Slow, 300*time.Millisecond)
	td := newTeardown(t, findProcess(t, d.Pid()), ublkhook.With(ublk.Config{}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: fixed}))
	rep, err := run(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	assert.False(t, rep.Daemon.Killed)
	<-d.Done()
	assert.Equal(t, 0, d.ExitCode())
}

func TestRealHungDaemonOnVulnerableKernelIsLeftRunning(t *testing.T) {
	d, sys, sock, _ := realDaemon(t, fakeublk.Hung, 0)
	s := &ublk.Socket{Path: sock, Process: findProcess(t, d.Pid())}
	td := newTeardown(t, s, ublkhook.With(ublk.Config{NoControl: true, RequestTimeout: 500 * time.Millisecond}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: vulnerable}))
	rep, err := run(t, td, 2*time.Second)
	var unsafe *ublk.UnsafeError
	require.ErrorAs(t, err, &unsafe)
	assert.Equal(t, []int{0, 1}, unsafe.Devices)
	assert.Contains(t, err.Error(), "daemon left running, unsafe to kill")
	assert.Equal(t, -1, d.ExitCode(), "the daemon is still running")
	assert.False(t, rep.Daemon.Killed)
	assert.True(t, rep.Daemon.LeftRunning)
	assert.Contains(t, rep.Daemon.RequestError, "no answer")
	assert.Equal(t, []int{0, 1}, (&fakeublk.Tree{Root: sys}).Devices())
}

func TestRealHungDaemonOnFixedKernelIsKilledAtTheEnd(t *testing.T) {
	d, sys, _, _ := realDaemon(t, fakeublk.Hung, 0)
	td := newTeardown(t, findProcess(t, d.Pid()), ublkhook.With(ublk.Config{NoControl: true, Reserve: 3500 * time.Millisecond}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: fixed}))
	rep, err := run(t, td, 3*time.Second)
	var inc *ublk.IncompleteError
	require.ErrorAs(t, err, &inc)
	assert.Equal(t, ublk.VerdictKilled, inc.Verdict)
	<-d.Done()
	assert.True(t, d.Signaled(syscall.SIGKILL))
	assert.True(t, rep.Daemon.Killed)
	assert.True(t, rep.Daemon.Exited, "the kill was seen through the pidfd before the deadline")
	assert.Equal(t, ublk.VerdictKilled, rep.Device(0).Verdict)
}

func TestRealDaemonCrashingMidWay(t *testing.T) {
	d, sys, _, log := realDaemon(t, fakeublk.Crash, 0)
	td := newTeardown(t, findProcess(t, d.Pid()), ublkhook.With(ublk.Config{NoControl: true}, ublkhook.Hooks{ProcfsRoot: t.TempDir(), SysfsRoot: sys, KernelRelease: vulnerable}))
	rep, err := run(t, td, 20*time.Second)
	var inc *ublk.IncompleteError
	require.ErrorAs(t, err, &inc)
	assert.Equal(t, []int{1}, inc.Devices)
	assert.Equal(t, ublk.VerdictOrphaned, rep.Device(1).Verdict)
	assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
	<-d.Done()
	assert.Equal(t, fakeublk.CrashStatus, d.ExitCode())
	assert.Contains(t, events(t, log), "crash\n")
}

// With the last resort off, a VMM that never closes keeps the daemon
// running: the step reports it and never asks the daemon to stop.
func TestVMMHoldingADeviceKeepsTheDaemonRunningWithoutLastResort(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	vmm, _ := loopdev.Hold(t, node)

	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoLastResort: true}, ublkhook.Hooks{OpenControl: noControl, SysfsRoot: sys, KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 10*time.Second)
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	require.NotEmpty(t, held.Holders[0])
	var pids []int
	for _, h := range held.Holders[0] {
		pids = append(pids, h.PID)
	}
	assert.Contains(t, pids, vmm.Process.Pid, "the VMM is named")
	assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
	assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the VMM")
	assert.False(t, strings.Contains(events(t, log), "sigterm"), "and was never asked to stop")
}

func TestTeardownProceedsOnceTheVMMCloses(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, _ := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor})
	vmm, stdin := loopdev.Hold(t, node)
	waiting := logbuf.NewSignal("waiting for the devices' holders to close")
	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{Logger: slog.New(slog.NewTextHandler(waiting, nil))},
		ublkhook.Hooks{OpenControl: noControl, SysfsRoot: sys, ProcfsRoot: ownProcfs(t, d.Pid(), vmm.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	go func() {
		// The VMM shuts down while the step waits: once the step has seen it.
		// (300 ms after the start, as it was, the step had not always
		// scanned once on loaded cores.)
		select {
		case <-waiting.Seen():
		case <-t.Context().Done():
		}
		stdin.Close()
	}()
	rep, err := run(t, td, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	var pids []int // a process whose mappings were not read in time is a possible holder too
	for _, h := range rep.Device(0).Holders {
		pids = append(pids, h.PID)
	}
	assert.Contains(t, pids, vmm.Process.Pid, "the holder it waited for is reported")
}

func TestProcessWaitSeesExitAndHonoursDeadline(t *testing.T) {
	d, _, _, _ := realDaemon(t, fakeublk.Hung, 0)
	p := findProcess(t, d.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, p.Wait(ctx), context.DeadlineExceeded)
	assert.False(t, p.Exited())
	require.NoError(t, p.Kill(context.Background()))
	require.NoError(t, p.Wait(context.Background()))
	assert.True(t, p.Exited())
	<-d.Done() // reaped by its parent: the pidfd still answers
	require.NoError(t, p.Wait(context.Background()))
	assert.NoError(t, p.RequestStop(context.Background()), "signalling an exited process is not an error")
	require.NoError(t, p.Close())
	assert.Error(t, p.Wait(context.Background()))
}

func TestFindProcessFailsForNoProcess(t *testing.T) {
	_, err := ublk.FindProcess(0)
	assert.Error(t, err)
	_, err = ublk.FindProcess(1 << 22) // above pid_max's ceiling
	assert.True(t, errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.EINVAL), "%v", err)
}

// AgentENV's daemon may never answer the shutdown request: it holds the
// connection while it stops its devices and exits. With its Process paired,
// that counts as delivered, and the teardown ends with every device
// stopped by the daemon.
func TestSocketSilentDaemonThatExitsIsStoppedCleanly(t *testing.T) {
	sys, dir := t.TempDir(), t.TempDir()
	log, sock := filepath.Join(dir, "events"), filepath.Join(dir, "ublkd.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Socket: sock, Silent: true, EventLog: log,
		Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}, {ID: 1, Major: 4000, Minor: 1}}})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	s := &ublk.Socket{Path: sock, Process: findProcess(t, d.Pid())}

	require.NoError(t, s.RequestStop(ctx), "no answer, then the exit: delivered")
	<-d.Done()
	assert.Equal(t, 0, d.ExitCode())
	assert.Contains(t, events(t, log), "request shutdown")
	assert.Contains(t, events(t, log), "exit")
	assert.NoError(t, s.RequestStop(ctx), "a daemon that has exited needs no request")
}

// A silent daemon that never exits is not taken as stopped: the request
// fails by its deadline.
func TestSocketSilentDaemonThatStaysIsAnError(t *testing.T) {
	sys, dir := t.TempDir(), t.TempDir()
	sock := filepath.Join(dir, "ublkd.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Socket: sock, Mode: fakeublk.Hung,
		Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}}})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	s := &ublk.Socket{Path: sock, Process: findProcess(t, d.Pid())}
	rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer rcancel()
	assert.ErrorIs(t, s.RequestStop(rctx), context.DeadlineExceeded)
}

// A Stop whose context is already done still scans every process for
// holders (Stop may take one procfs read past its deadline): a scan that
// the context cut short found nobody, and the daemon was asked to stop
// under the VMM that still held its disk. It is named instead, and the
// daemon keeps serving it.
func TestHolderScanIsNotCutShortByTheContext(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	vmm, _ := loopdev.Hold(t, node)
	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{}, ublkhook.Hooks{OpenControl: noControl, SysfsRoot: sys, KernelRelease: vulnerable}))
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the drain ran out of time before the step
	rep, err := td.Stop(ctx)
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	require.NotEmpty(t, held.Holders[0])
	assert.Equal(t, vmm.Process.Pid, held.Holders[0][0].PID, "the VMM is named")
	assert.False(t, rep.Daemon.Requested, "the daemon is not asked to stop")
	assert.NotContains(t, events(t, log), "sigterm", "and gets no SIGTERM")
	assert.Equal(t, -1, d.ExitCode(), "it keeps serving the VMM")
	assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
}

// Late is better than never where nothing holds a disk: with its context
// already done the step still asks the daemon to stop, so that it stops
// its devices itself before the pod's SIGKILL instead of dying with them.
func TestDaemonIsAskedToStopWithTheContextAlreadyDone(t *testing.T) {
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0)
	td := newTeardown(t, findProcess(t, d.Pid()), ublkhook.With(ublk.Config{}, ublkhook.Hooks{SysfsRoot: sys, KernelRelease: vulnerable}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := td.Stop(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.True(t, rep.Daemon.Requested)
	<-d.Done()
	assert.Equal(t, 0, d.ExitCode())
	assert.Contains(t, events(t, log), "sigterm")
}

// A daemon that died before the step asked it anything (crashed while the
// VMM still held its disk) is reported exited, not left running: the
// step that returns HeldError without a stop request still looks.
func TestDaemonThatDiedDuringTheHolderWaitIsNotReportedRunning(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, _ := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	loopdev.Hold(t, node)
	daemon := findProcess(t, d.Pid())
	d.Close() // SIGKILL: it crashed
	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{HolderWait: time.Nanosecond, NoLastResort: true}, ublkhook.Hooks{OpenControl: noControl, SysfsRoot: sys, KernelRelease: vulnerable}))
	require.NoError(t, err)

	rep, err := run(t, td, 10*time.Second)
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	assert.False(t, rep.Daemon.Requested)
	assert.True(t, rep.Daemon.Exited, "the daemon is gone")
	assert.False(t, rep.Daemon.LeftRunning, "and was not left running")
}
