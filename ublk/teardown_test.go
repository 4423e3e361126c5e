package ublk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

const (
	vulnerable = "6.8.0-45-generic"
	fixed      = "6.14.8"
	mayHang    = "6.14.6" // fix f40139fde527 without dd24f87f65c9
)

// runFor runs td with a budget and returns the report, the error and the
// virtual time Run took.
func runFor(t *testing.T, td *Teardown, budget time.Duration) (*Report, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	rep, err := td.Stop(ctx)
	require.NotNil(t, rep)
	return rep, time.Since(start), err
}

func TestCooperativeDaemonStopsEveryDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)

		rep, took, err := runFor(t, td, 3600*time.Second)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.Equal(t, 4*time.Second, took, "returns as soon as the daemon is done, not at the deadline")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		require.Len(t, rep.Devices, 2)
		for _, dr := range rep.Devices {
			assert.Equal(t, VerdictStopped, dr.Verdict)
			assert.Equal(t, "live", dr.Initial.State())
			assert.Equal(t, "gone", dr.Final.State())
			assert.Equal(t, uint64(4), dr.InflightBefore.Total())
			assert.Equal(t, uint64(0), dr.InflightAfter.Total(), "the live queues drained the I/O before the disk went")
			assert.Empty(t, dr.Holders)
		}
		disk := rep.Devices[1].Steps[0]
		assert.Equal(t, "disk removed", disk.Name)
		assert.InDelta(t, 3*time.Second, disk.Duration, float64(td.cfg.poll), "seen within one poll interval")
		assert.True(t, rep.Daemon.Requested && rep.Daemon.Exited && !rep.Daemon.Killed && !rep.Daemon.LeftRunning)
	})
}

func TestSlowDaemonGetsTheWholeBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1, 2)
		d := newMemDaemon(f.tree, 0, 1, 2)
		d.step = 40 * time.Second // 240 s in all, inside a 300 s budget
		defer d.close()
		td, err := New(d, f.config(fixed, nil, Config{}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 300*time.Second)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.Equal(t, 240*time.Second, took)
		assert.NotContains(t, d.Events(), "kill", "a daemon still making progress is not killed early")
	})
}

func TestHungDaemonOnVulnerableKernelIsNeverKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true, PollInterval: 5 * time.Second}))
		require.NoError(t, err)

		rep, took, err := runFor(t, td, 3600*time.Second)
		assert.Equal(t, 3600*time.Second, took, "waits for the daemon until the deadline, not later")
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Equal(t, []int{0, 1}, unsafe.Devices)
		assert.Contains(t, err.Error(), "still live")
		assert.Contains(t, err.Error(), "daemon left running, unsafe to kill")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotContains(t, d.Events(), "kill")
		assert.Equal(t, VerdictLeftLive, rep.Verdict)
		assert.True(t, rep.Daemon.LeftRunning)
		assert.False(t, rep.Daemon.Killed)
		for _, dr := range rep.Devices {
			assert.Equal(t, VerdictLeftLive, dr.Verdict)
			assert.Equal(t, "live", dr.Final.State())
			assert.Equal(t, uint64(4), dr.InflightAfter.Total())
		}
	})
}

// A kernel whose server exit may hang is planned like a vulnerable one: the
// daemon with live devices is left running, and the Report says why.
func TestHungDaemonOnExitMayHangKernelIsNeverKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(mayHang, nil, Config{NoControl: true, Reserve: 15 * time.Second}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 600*time.Second)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Contains(t, err.Error(), "on exit_may_hang kernel 6.14.6")
		assert.NotContains(t, d.Events(), "kill")
		assert.Equal(t, VerdictLeftLive, rep.Verdict)
		assert.Equal(t, KernelDecision{Release: mayHang, Class: KernelExitMayHang, Rule: "exit_may_hang",
			Detail: "kernel.org release with fix f40139fde527 but without dd24f87f65c9: a server exit may hang"}, rep.KernelDecision)
		assert.Contains(t, rep.String(), `by rule "exit_may_hang"`)
	})
}

// The Report says which declaration decided, and from which release.
func TestReportNamesTheDeclarationThatDecided(t *testing.T) {
	decls, err := parseDeclarations(strings.NewReader("fixed 6.8.0-1[0-9][0-9]-generic\nvulnerable 6.8.0-*-generic\n"), "kernels")
	require.NoError(t, err)
	for release, want := range map[string]KernelDecision{
		"6.8.0-101-generic": {Release: "6.8.0-101-generic", Class: KernelFixed, Rule: "declared",
			Detail: "declared fixed by the operator (kernels:1)", Declaration: &decls[0]},
		"6.8.0-45-generic": {Release: "6.8.0-45-generic", Class: KernelVulnerable, Rule: "declared",
			Detail: "declared vulnerable by the operator (kernels:2)", Declaration: &decls[1]},
		"6.8.0-45-aws": {Release: "6.8.0-45-aws", Class: KernelVulnerable, Rule: "vendor_build",
			Detail: "vendor build, not declared: treated as vulnerable"},
	} {
		td, err := New(nil, Config{Kernels: decls, hooks: ublkhook.Hooks{KernelRelease: release, SysfsRoot: t.TempDir()}})
		require.NoError(t, err)
		rep, err := td.Stop(t.Context())
		require.NoError(t, err)
		assert.Equal(t, want, rep.KernelDecision, release)
		assert.Equal(t, want, td.KernelDecision(), release)
	}
}

func TestHungDaemonOnFixedKernelIsKilledAtTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(fixed, nil, Config{NoControl: true, Reserve: 15 * time.Second}))
		require.NoError(t, err)

		start := time.Now()
		rep, took, err := runFor(t, td, 600*time.Second)
		assert.Less(t, took, 600*time.Second)
		var inc *IncompleteError
		require.ErrorAs(t, err, &inc)
		assert.Equal(t, VerdictKilled, inc.Verdict)
		assert.Equal(t, []string{"request", "kill", "exit killed"}, d.Events())
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill)
		assert.Equal(t, 597*time.Second, kill.Start.Sub(start), "killed the kill's part of the reserve (2/10 of 15 s) before the deadline")
		assert.Equal(t, VerdictKilled, rep.Devices[0].Verdict)
		assert.True(t, rep.Daemon.Killed && rep.Daemon.Exited)
	})
}

func TestControlFallbackMakesKillSafeOnVulnerableKernel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: time.Second}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)

		start := time.Now()
		rep, _, err := runFor(t, td, 100*time.Second)
		require.NoError(t, err)
		assert.Equal(t, VerdictStoppedByControl, rep.Verdict)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "STOP_DEV 1", "kill", "exit killed", "DEL_DEV 0", "DEL_DEV 1"}, d.Events(),
			"killed only after STOP_DEV completed for every device")
		fb := rep.Step("control fallback")
		require.NotNil(t, fb)
		assert.Equal(t, 95*time.Second, fb.Start.Sub(start), "fallback starts when only its part and the kill's part of the reserve (3 s + 2 s) are left")
		for _, dr := range rep.Devices {
			assert.Equal(t, VerdictStoppedByControl, dr.Verdict)
			require.NotNil(t, dr.Info)
			assert.Equal(t, ublkctl.StateLive.String(), dr.Info.State)
		}
	})
}

func TestCrashedDaemonLeavesOrphans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1, 2)
		d := newMemDaemon(f.tree, 0, 1, 2)
		d.crashAfter = 1
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 3600*time.Second)
		assert.Equal(t, 2*time.Second, took, "a crash is seen at once, not at the deadline")
		var inc *IncompleteError
		require.ErrorAs(t, err, &inc)
		assert.Equal(t, []int{1, 2}, inc.Devices)
		assert.Equal(t, VerdictOrphaned, inc.Verdict)
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.Equal(t, VerdictOrphaned, rep.Device(1).Verdict)
		assert.False(t, rep.Daemon.Killed)
	})
}

func TestCrashedDaemonsDevicesAreDeletedThroughControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
		assert.Contains(t, d.Events(), "DEL_DEV 1")
	})
}

func TestHeldDeviceKeepsTheDaemonRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		f.hold(t, 1, "dm-3")
		d := newMemDaemon(f.tree, 0, 1)
		defer d.close()
		td, err := New(d, f.config(fixed, nil, Config{HolderWait: 30 * time.Second}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 600*time.Second)
		assert.Equal(t, 30*time.Second, took)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, []Holder{{Kind: "stacked", Detail: "dm-3"}}, held.Holders[1])
		assert.Contains(t, err.Error(), "ublkb1 held by stacked dm-3")
		assert.Empty(t, d.Events(), "the daemon was never asked to stop")
		assert.Equal(t, VerdictHeld, rep.Device(1).Verdict)
		assert.Equal(t, VerdictNotStopped, rep.Device(0).Verdict)
		assert.Equal(t, VerdictHeld, rep.Verdict)
		assert.True(t, rep.Daemon.Present && rep.Daemon.LeftRunning)
	})
}

func TestStopProceedsOnceTheHolderCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		p := f.hold(t, 0, "dm-0")
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		go func() { time.Sleep(12 * time.Second); _ = os.Remove(p) }()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 600*time.Second)
		require.NoError(t, err)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.InDelta(t, 12*time.Second, h.Duration, float64(100*time.Millisecond))
		assert.Equal(t, []Holder{{Kind: "stacked", Detail: "dm-0"}}, rep.Device(0).Holders, "the holder is reported")
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

func TestStopDespiteHoldersPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		f.hold(t, 0, "md0")
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{HolderWait: 5 * time.Second, StopDespiteHolders: true}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 600*time.Second)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.Equal(t, "request", d.Events()[0])
	})
}

func TestFailedRequestFallsBackToControlAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.failRequest = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d}
		td, err := New(d, f.config(vulnerable, ctl, Config{ExitWait: 2 * time.Second}))
		require.NoError(t, err)
		start := time.Now()
		rep, took, err := runFor(t, td, 600*time.Second)
		require.NoError(t, err)
		assert.Equal(t, start, rep.Step("control fallback").Start, "no waiting for a daemon that did not get the request")
		assert.Equal(t, []string{"request", "STOP_DEV 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		assert.Equal(t, 2*time.Second, took, "killed ExitWait after its last device stopped")
		assert.Equal(t, "connection refused", rep.Daemon.RequestError)
	})
}

func TestUnavailableControlIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{ControlPath: f.proc + "/no-ublk-control"}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 60*time.Second)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.ErrorIs(t, err, ublkctl.ErrNoControl)
		assert.Contains(t, rep.Note, "control fallback unavailable")
		assert.Contains(t, err.Error(), "modprobe ublk_drv")
	})
}

func TestDaemonWithoutDevicesLeftIsKilledAfterExitWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		d := newMemDaemon(f.tree)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{ExitWait: 7 * time.Second}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 600*time.Second)
		require.NoError(t, err, "no device was live, so killing was safe")
		assert.Equal(t, 7*time.Second, took)
		assert.True(t, rep.Daemon.Killed)
	})
}

func TestUnkillableDaemonOnFixedKernel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung, d.cannotKill = true, true
		defer d.close()
		td, err := New(d, f.config(fixed, nil, Config{NoControl: true}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 60*time.Second)
		assert.Equal(t, 60*time.Second, took)
		var inc *IncompleteError
		require.ErrorAs(t, err, &inc)
		assert.Equal(t, VerdictNotStopped, inc.Verdict)
		assert.Equal(t, ErrCannotKill.Error(), rep.Daemon.KillError)
	})
}

func TestNothingToDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		td, err := New(nil, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, VerdictNothingToDo, rep.Verdict)
		assert.Zero(t, took)
		assert.Empty(t, rep.Devices)
	})
}

func TestListedDevicesOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1, 7)
		d := newMemDaemon(f.tree, 7)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{Devices: []int{7}}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		require.NoError(t, err)
		require.Len(t, rep.Devices, 1)
		assert.Equal(t, 7, rep.Devices[0].ID)
		assert.Equal(t, []int{0, 1}, f.tree.Devices(), "other servers' devices are left alone")
	})
}

func TestDevicesGoingWithoutDaemonAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		td, err := New(nil, f.config(fixed, nil, Config{NoControl: true}))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(90 * time.Second); cancel() }()
		start := time.Now()
		rep, err := td.Stop(ctx)
		assert.Equal(t, 90*time.Second, time.Since(start), "without a deadline it waits until cancelled")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, VerdictNotStopped, rep.Verdict)
	})
}

func TestRunIsTheDrainStepAndCarriesTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		var step interface {
			Phase() deadline.Phase
			Run(context.Context) (any, error)
		} = td // drain.Step, which this package may not import
		ph := step.Phase()
		assert.Equal(t, "ublk", ph.Name)
		assert.True(t, ph.Critical, "the device teardown keeps its reserve whatever the user sets")
		assert.Equal(t, 10*time.Second, ph.Reserve())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		detail, err := step.Run(ctx)
		var unsafe *UnsafeError
		assert.True(t, errors.As(err, &unsafe))
		rep, ok := detail.(*Report)
		require.True(t, ok, "the detail is the *Report, not a wrapper")
		assert.Equal(t, VerdictLeftLive, rep.Verdict)
	})
}

func TestNewRejectsBadConfigurationNamingTheField(t *testing.T) {
	for want, c := range map[string]Config{
		"ublk: Config.Devices must hold IDs >= 0, got -1":   {Devices: []int{0, -1}},
		"ublk: Config.Kernels[1] is bad":                    {Kernels: KernelDeclarations{{Pattern: "6.8.*", Class: KernelFixed}, {Pattern: "6.8.[", Class: KernelFixed}}},
		`class "unaffected"`:                                {Kernels: KernelDeclarations{{Pattern: "6.8.*", Class: KernelUnaffected}}},
		"ublk: Config.PollInterval must be >= 0, got -1ns":  {PollInterval: -1},
		"ublk: Config.HolderWait must be >= 0, got -1s":     {HolderWait: -time.Second},
		"ublk: Config.RequestTimeout must be >= 0, got -1s": {RequestTimeout: -time.Second},
		"ublk: Config.ExitWait must be >= 0, got -1ns":      {ExitWait: -1},
		"ublk: Config.Reserve must be >= 0, got -1s":        {Reserve: -time.Second},
	} {
		_, err := New(nil, c)
		assert.ErrorContains(t, err, want)
	}
}

// A device ID no ublk device can have (the driver's IDs are below
// UBLK_MAX_UBLKS, 1<<20) is refused at New, naming it. Before, New took
// it, and Stop at SIGTERM followed a device never in sysfs: VerdictAbsent,
// a Note, and no error, the misconfiguration (a typo for a real ID, whose
// device the step then left out) said nowhere at start.
func TestNewRejectsADeviceIDTheDriverCannotHave(t *testing.T) {
	for _, id := range []int{1 << 20, 1 << 32} {
		_, err := New(nil, Config{Devices: []int{0, id}, hooks: ublkhook.Hooks{KernelRelease: vulnerable}})
		assert.EqualError(t, err, fmt.Sprintf("ublk: Config.Devices must hold IDs below 1048576 "+
			"(the ublk driver's UBLK_MAX_UBLKS: no device has a larger one), got %d", id))
	}
	_, err := New(nil, Config{Devices: []int{1<<20 - 1}, hooks: ublkhook.Hooks{KernelRelease: vulnerable}})
	assert.NoError(t, err, "the last ID a device can have")
}

// A device listed twice in Config.Devices was torn down twice and had two
// DeviceReports (and two counts in drainkit.ublk.devices), where the
// Report promises one per device. New names the repeat.
func TestNewRejectsADeviceListedTwice(t *testing.T) {
	_, err := New(nil, Config{Devices: []int{3, 0, 3}, hooks: ublkhook.Hooks{KernelRelease: vulnerable}})
	assert.EqualError(t, err, "ublk: Config.Devices must not repeat an ID, got 3 twice")
}

// The zero Config is the safe default: the default reserve, split
// 3:2:3:2, the last resort and the control fallback on.
func TestZeroConfigIsTheSafeDefault(t *testing.T) {
	td, err := New(nil, Config{hooks: ublkhook.Hooks{KernelRelease: vulnerable}})
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, td.Phase().Reserve())
	assert.True(t, td.LastResort())
	assert.NotNil(t, td.cfg.openControl, "the control fallback is on")
	assert.Equal(t, 5*time.Second, td.cfg.exitWait)
	assert.Equal(t, 5*time.Second, td.cfg.requestTimeout)
	assert.Equal(t, 100*time.Millisecond, td.cfg.poll)
	assert.Equal(t, []time.Duration{3 * time.Second, 2 * time.Second, 3 * time.Second, 2 * time.Second},
		[]time.Duration{td.cfg.lastResortReserve, td.cfg.stopReserve, td.cfg.controlReserve, td.cfg.killReserve})
	assert.Equal(t, "/sys", td.cfg.sysRoot)
	assert.Equal(t, "/proc", td.cfg.procRoot)
}

func TestUnrecognisedReleaseIsTreatedAsVulnerable(t *testing.T) {
	td, err := New(nil, Config{hooks: ublkhook.Hooks{KernelRelease: "mystery", SysfsRoot: t.TempDir()}})
	require.NoError(t, err)
	_, class := td.Kernel()
	assert.Equal(t, KernelVulnerable, class)
	td, err = New(nil, Config{Kernels: KernelDeclarations{{Pattern: "myst*", Class: KernelFixed}}, hooks: ublkhook.Hooks{KernelRelease: "mystery"}})
	require.NoError(t, err)
	_, class = td.Kernel()
	assert.Equal(t, KernelFixed, class)
}

func TestUnansweredRequestFallsBackAfterRequestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.mute = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d}
		td, err := New(d, f.config(vulnerable, ctl, Config{RequestTimeout: 3 * time.Second}))
		require.NoError(t, err)
		start := time.Now()
		rep, _, err := runFor(t, td, 600*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 3*time.Second, rep.Step("control fallback").Start.Sub(start))
		assert.Contains(t, rep.Daemon.RequestError, "deadline exceeded")
		assert.Equal(t, VerdictStoppedByControl, rep.Verdict)
	})
}

func TestPartitionHolderCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		f.partitionHeld(t, 0, 1, "dm-9")
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{HolderWait: time.Second}))
		require.NoError(t, err)
		_, _, err = runFor(t, td, time.Minute)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, []Holder{{Kind: "stacked", Detail: "dm-9"}}, held.Holders[0])
	})
}

func TestRecoveryDevicesOfACrashedDaemonAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, flags: ublkctl.FlagUserRecovery}
		td, err := New(d, f.config(fixed, ctl, Config{}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		var inc *IncompleteError
		require.ErrorAs(t, err, &inc)
		assert.Equal(t, []int{1}, inc.Devices)
		assert.NotContains(t, d.Events(), "DEL_DEV 1")
		assert.NotContains(t, d.Events(), "STOP_DEV 1")
		assert.Equal(t, VerdictOrphaned, rep.Device(1).Verdict)
		last := rep.Device(1).Steps[len(rep.Device(1).Steps)-1]
		assert.Equal(t, "kept for recovery", last.Name)
	})
}

// The kernel removes /sys/block/ublkbN when STOP_DEV starts, before it has
// drained the I/O that only the daemon can answer. A device without a disk
// whose STOP_DEV never completed is still live: the daemon must not be
// killed on a vulnerable kernel.
func TestDiskGoneButStopPendingIsStillLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, drainBlocks: true}
		td, err := New(d, f.config(vulnerable, ctl, Config{ExitWait: time.Second}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, 60*time.Second)
		assert.Equal(t, 60*time.Second, took)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.NotContains(t, d.Events(), "kill")
		assert.False(t, rep.Daemon.Killed)
		dr := rep.Device(0)
		assert.Equal(t, "dead", dr.Final.State(), "sysfs shows no disk")
		assert.Equal(t, VerdictLeftLive, dr.Verdict, "but the driver still has it live")
		assert.Equal(t, uint64(4), dr.InflightAfter.Total(), "the last in-flight count seen stays reported")
		var stop *StepResult
		for i := range dr.Steps {
			if dr.Steps[i].Name == "STOP_DEV" {
				stop = &dr.Steps[i]
			}
		}
		require.NotNil(t, stop)
		assert.Contains(t, stop.Result, "deadline exceeded")
	})
}

// A hung daemon holds I/O on a vulnerable kernel: 0 .. 54 s, the control
// fallback sends STOP_DEV, which removes the disk from sysfs at once and
// then waits in the kernel for the I/O only the daemon can answer .. 57 s,
// the kill's part of the reserve: its completion not seen, the command
// still runs in the kernel (the driver does not cancel control commands),
// and may finish after the step returns .. 60 s: the step returns
// left_live, the daemon left running. The Report says what it knows:
// STOP_DEV sent and not complete (pending), not failed; the disk removed
// by that STOP_DEV, not by the hung daemon; and a note that the device may
// stop after the step. Before, the STOP_DEV step said it failed ("context
// deadline exceeded"), the disk's removal was put down to the daemon, and
// the one-line summary read "live -> dead" with nothing pending.
func TestStopDevNotCompleteByItsWindowsEndIsReportedPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, drainBlocks: true}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 60*time.Second)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		dr := rep.Device(0)
		assert.Equal(t, VerdictLeftLive, dr.Verdict)
		assert.Equal(t, []string{"STOP_DEV"}, dr.Pending)
		steps := map[string]StepResult{}
		for _, s := range dr.Steps {
			steps[s.Name] = s
		}
		assert.Empty(t, steps["STOP_DEV"].Err, "sent, not failed")
		assert.Contains(t, steps["STOP_DEV"].Result, "sent; not complete when its window ended")
		assert.Equal(t, "after STOP_DEV (sent, not seen complete)", steps["disk removed"].Result, "not by the hung daemon")
		assert.Contains(t, rep.Note, "ublkb0: STOP_DEV sent, not complete when the step ended")
		assert.Contains(t, rep.String(), "ublkb0: live -> dead, STOP_DEV pending;")
	})
}

// A hung daemon on a vulnerable kernel, its I/O slow to drain: 55 s, the
// control fallback sends STOP_DEV .. 58 s, the kill's part of the
// reserve: its completion not seen, the command runs on in the kernel ..
// 58.5 s: the kernel completes it, the device DEAD .. the step asks the
// driver (GET_DEV_INFO) at its next poll, kills the daemon, no device
// live, and deletes the device: stopped_by_control, no error. Before, a
// STOP_DEV sent was seen complete only by the command's own answer: the
// step counted the device live to its end, left the daemon running and
// the device undeleted, and returned an UnsafeError naming a device that
// was safe (left_live, "STOP_DEV pending").
func TestStopDevCompletedAfterItsWindowIsSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: 3500 * time.Millisecond, runsOn: true}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		start := time.Now()
		rep, took, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		assert.Less(t, took, 59*time.Second, "killed once the driver said DEAD, not left to the deadline")
		dr := rep.Device(0)
		assert.Equal(t, VerdictStoppedByControl, dr.Verdict)
		assert.Empty(t, dr.Pending)
		seen := rep.Device(0).Steps
		i := slices.IndexFunc(seen, func(s StepResult) bool { return s.Name == "STOP_DEV complete" })
		require.GreaterOrEqual(t, i, 0, "steps: %v", seen)
		assert.GreaterOrEqual(t, seen[i].Start.Sub(start), 58500*time.Millisecond)
		assert.Contains(t, seen[i].Result, "GET_DEV_INFO says dead")
		assert.True(t, rep.Daemon.Killed)
	})
}

// A daemon that crashed with I/O in flight leaves its device; the control
// fallback's STOP_DEV waits on that I/O with the step's own context, which
// has no deadline and is cancelled (a drain's force) at 30 s. The STOP_DEV
// is pending, and its result says the step was cancelled. Before, it
// said its window ended at 0001-01-01T00:00:00Z, the zero time of a
// context with no deadline.
func TestStopDevPendingAtACancelSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.crashAfter = 0
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, drainBlocks: true}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		time.AfterFunc(30*time.Second, cancel)

		rep, _ := td.Stop(ctx)
		require.NotNil(t, rep)
		var stop *StepResult
		for i, s := range rep.Device(0).Steps {
			if s.Name == "STOP_DEV" {
				stop = &rep.Device(0).Steps[i]
			}
		}
		require.NotNil(t, stop)
		assert.Empty(t, stop.Err)
		assert.Contains(t, stop.Result, "sent; not complete when the step was cancelled (context canceled)")
		assert.NotContains(t, stop.Result, "0001-01-01")
	})
}

// A daemon that stopped its disks itself and then hung before deleting
// them: without a control device the step cannot know STOP_DEV finished,
// so it does not kill on a vulnerable kernel; with one, GET_DEV_INFO says
// DEAD and the kill is safe.
func TestDaemonHungAfterStoppingItsDisks(t *testing.T) {
	for _, withControl := range []bool{false, true} {
		t.Run(map[bool]string{false: "no control", true: "control"}[withControl], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0, 1)
				d := newMemDaemon(f.tree, 0, 1)
				d.hangAfterStop = true
				defer d.close()
				var ctl *memControl
				if withControl {
					ctl = &memControl{tree: f.tree, d: d}
				}
				td, err := New(d, f.config(vulnerable, ctl, Config{ExitWait: time.Second, NoControl: !withControl}))
				require.NoError(t, err)
				rep, _, err := runFor(t, td, 60*time.Second)
				if !withControl {
					var unsafe *UnsafeError
					require.ErrorAs(t, err, &unsafe)
					assert.NotContains(t, d.Events(), "kill")
					return
				}
				require.NoError(t, err)
				assert.NotContains(t, d.Events(), "STOP_DEV 0", "GET_DEV_INFO said DEAD: no second STOP_DEV")
				assert.Contains(t, d.Events(), "kill")
				assert.Contains(t, d.Events(), "DEL_DEV 1")
				assert.Equal(t, VerdictStoppedByControl, rep.Verdict)
				assert.Equal(t, "dead", rep.Device(0).Info.State)
			})
		})
	}
}

func TestErrorMessagesAreOneLine(t *testing.T) {
	err := &UnsafeError{Devices: []int{0, 3}, Kernel: vulnerable,
		Cause: errors.Join(errors.New("STOP_DEV dev 0: timeout"), context.DeadlineExceeded)}
	assert.Equal(t, "ublk: 2 device(s) still live (ublkb0, ublkb3) on vulnerable kernel 6.8.0-45-generic: "+
		"daemon left running, unsafe to kill: STOP_DEV dev 0: timeout; context deadline exceeded", err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	inc := &IncompleteError{Devices: []int{1}, Verdict: VerdictKilled}
	assert.Equal(t, "ublk: 1 device(s) left (ublkb1): "+string(VerdictKilled), inc.Error())
}

// A deleted device's ID goes to the next ADD_DEV, another server's (a new
// pod's, started before this one ended): the device that then has it is
// not this daemon's, whether the step saw the ID free between the two or
// not. Here the daemon deletes devices 0 and 1 and crashes, leaving device
// 2 to the control fallback; another server takes ID 0 at once (retaken)
// or half a second later. Before, the step took the new device 0 for the
// one it had seen go, and the fallback sent it STOP_DEV and DEL_DEV with
// device 2: another server's live disk, stopped and deleted under it.
func TestADeviceThatGotADeletedOnesIDIsAnothers(t *testing.T) {
	for _, atOnce := range []bool{true, false} {
		t.Run(fmt.Sprintf("at once %v", atOnce), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0, 1, 2)
				d := newMemDaemon(f.tree, 0, 1, 2)
				d.crashAfter = 2
				if atOnce {
					d.retaken = map[int]bool{0: true}
				} else {
					go func() { // the daemon deletes device 0 at 2 s
						time.Sleep(2500 * time.Millisecond)
						_ = f.tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0})
					}()
				}
				defer d.close()
				ctl := &memControl{tree: f.tree, d: d}
				td, err := New(d, f.config(vulnerable, ctl, Config{}))
				require.NoError(t, err)
				rep, _, err := runFor(t, td, 60*time.Second)
				require.NoError(t, err)
				assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit crash", "STOP_DEV 2", "DEL_DEV 2"}, d.Events())
				assert.Equal(t, "gone", rep.Device(0).Final.State())
				assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
				assert.Equal(t, VerdictStoppedByControl, rep.Device(2).Verdict)
				assert.True(t, f.tree.HasDisk(0), "the other server's device 0 stays live")
			})
		})
	}
}

// Fault: a Teardown not made by New (a zero ublk.Teardown, or the nil
// *Teardown New returns with its error) panicked with a nil dereference in
// Stop and Run, at SIGTERM; its LastResort said true; and a Process not
// made by FindProcess, given as the daemon, panicked in every method. The
// Teardown now returns at once a Report with VerdictNotStopped and an
// error saying "ublk: Teardown not made by ublk.New" (the drain's step
// fails with it); the Process's methods return "ublk: Process not made by
// ublk.FindProcess", Exited false: no exit it did not see. docs/faults.md
// row 242.
func TestTeardownAndProcessNotMadeByTheirConstructorsSaySo(t *testing.T) {
	for name, td := range map[string]*Teardown{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			dl, _ := ctx.Deadline()
			for method, stop := range map[string]func() (any, error){
				"Stop": func() (any, error) { return td.Stop(ctx) },
				"Run":  func() (any, error) { return td.Run(ctx) },
			} {
				detail, err := stop()
				require.ErrorContains(t, err, "ublk: Teardown not made by ublk.New", method)
				rep, ok := detail.(*Report)
				require.True(t, ok, method)
				require.NotNil(t, rep, method)
				assert.Equal(t, VerdictNotStopped, rep.Verdict, method)
				assert.Contains(t, rep.Note, "ublk: Teardown not made by ublk.New", method)
				assert.Equal(t, dl, rep.Deadline, method)
				assert.NotNil(t, rep.Devices, method)
			}
			assert.False(t, td.LastResort())
			release, class := td.Kernel()
			assert.Empty(t, release)
			assert.Empty(t, class)
			assert.Zero(t, td.KernelDecision())
			ph := td.Phase()
			assert.Equal(t, "ublk", ph.Name)
			assert.True(t, ph.Critical)
			assert.Zero(t, ph.Reserve())
		})
	}
	for name, p := range map[string]*Process{"zero": {}, "nil": nil} {
		t.Run("Process "+name, func(t *testing.T) {
			const want = "ublk: Process not made by ublk.FindProcess"
			require.ErrorContains(t, p.RequestStop(t.Context()), want)
			require.ErrorContains(t, p.Kill(t.Context()), want)
			require.ErrorContains(t, p.Signal(0), want)
			require.ErrorContains(t, p.Wait(t.Context()), want)
			assert.False(t, p.Exited())
			assert.Zero(t, p.Pid())
			assert.NoError(t, p.Close())
		})
	}
}

// A daemon that crashes after its first device; the control fallback
// cannot read the driver's view of the second (GET_DEV_INFO fails: here
// EINVAL, as for a device made with UBLK_F_UNPRIVILEGED_DEV, whose
// commands must carry its path). The device's Report says GET_DEV_INFO
// failed and why: its flags, and so whether it awaits recovery, were not
// known; with its disk still there, the fallback leaves it (see
// TestControlFallbackLeavesADeviceThatMayAwaitRecovery). Before, the
// error was dropped: no step, no line, no cause.
func TestControlFallbackReportsADevInfoItCouldNotRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, infoErr: errors.New("ublk: GET_DEV_INFO: invalid argument")}
		td, err := New(d, f.config(fixed, ctl, Config{}))
		require.NoError(t, err)
		rep, _, _ := runFor(t, td, time.Minute)
		var info *StepResult
		for i, s := range rep.Device(1).Steps {
			if s.Name == "GET_DEV_INFO" {
				info = &rep.Device(1).Steps[i]
			}
		}
		require.NotNil(t, info, "the device's steps: %+v", rep.Device(1).Steps)
		assert.Equal(t, "ublk: GET_DEV_INFO: invalid argument", info.Err)
		assert.Contains(t, info.Result, "not known", "says what was not known")
		assert.NotContains(t, d.Events(), "DEL_DEV 1", "its flags not known, its disk there: left")
	})
}

// A daemon whose exit cannot be watched (its Wait fails at once: here a
// Process closed by its owner before Stop, "process closed"), that ignores
// its stop request, on a vulnerable kernel with no control device: the
// step waits until its deadline and leaves the daemon running with its
// device live, and the UnsafeError and the Report's Note say the exit
// could not be watched, and why. Before, the exit watcher dropped the
// error: the step waited blind, and nothing said its view of the daemon
// was gone.
func TestDaemonWhoseExitCannotBeWatchedSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := DaemonFuncs{
			WaitFunc: func(context.Context) error { return errors.New("ublk: process closed") },
			KillFunc: func(context.Context) error { return nil },
		}
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, time.Minute)
		assert.Equal(t, time.Minute, took)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.ErrorContains(t, err, "the daemon's exit could not be watched: ublk: process closed")
		assert.Contains(t, rep.Note, "the daemon's exit could not be watched: ublk: process closed")
		assert.True(t, rep.Daemon.LeftRunning)
	})
}

// 0 .. 3 s: sysfs's ublk-char class cannot be listed (here a file in its
// place, ENOTDIR: EMFILE or ENOMEM in the server for a moment) .. then it
// can. The step reads sysfs again every PollInterval until the holder
// wait's end, finds the device, asks the daemon to stop, and the device
// goes. Before, one failed read of sysfs ended the step at once: no device
// looked at, the daemon never asked to stop, to die at SIGKILL with its
// devices live, on a vulnerable kernel the host-crash path.
func TestDiscoveryRetriesASysfsThatCannotBeReadForAMoment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		class := filepath.Join(f.tree.Root, "class", "ublk-char")
		aside := class + ".aside"
		require.NoError(t, os.Rename(class, aside))
		require.NoError(t, os.WriteFile(class, nil, 0o644))
		time.AfterFunc(3*time.Second+time.Millisecond, func() { // not as a read runs
			require.NoError(t, os.Remove(class))
			require.NoError(t, os.Rename(aside, class))
		})
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit done"}, d.Events())
		disc := rep.Step("discover")
		require.NotNil(t, disc)
		assert.Contains(t, disc.Err, "not a directory", "the first read's failure is in the Report")
		assert.Contains(t, disc.Result, "1 device(s), sysfs read on try 32") // every 100 ms, 0 .. 3.1 s
	})
}

// retakeOnStop is a control device over which, as STOP_DEV of device at
// runs, the daemon deletes device id and another server's ADD_DEV takes
// its ID at once (retake): the race between the fallback's reading of a
// device and its STOP_DEV by that ID, made deterministic.
type retakeOnStop struct {
	*memControl
	at, id int
}

func (c retakeOnStop) StopDev(ctx context.Context, id int) error {
	if id == c.at {
		retake(c.tree, c.id)
	}
	return c.memControl.StopDev(ctx, id)
}

// A daemon serves ublkb0 and ublkb1 on a vulnerable kernel, a minute's
// window, and either takes the stop request and does nothing (hung: the
// control fallback at 55 s) or crashes at it (the fallback at once). The
// control fallback stops ublkb0, and as its STOP_DEV runs ublkb1 is
// deleted (by its daemon, or by anyone once it is gone) and another
// server's new device gets ID 1. The fallback read ublkb1 before, and
// STOP_DEV and DEL_DEV take only an ID: sent by it, they stop (and
// delete) the other server's live disk. The step reads the device's
// sysfs entry again just before each command, finds another device at
// ID 1, and sends neither. Before, "STOP_DEV 1" (and "DEL_DEV 1" once
// the daemon was gone) removed the other server's disk.
func TestFallbackSendsNoStopDevToADeviceThatGotTheIDSinceItsRead(t *testing.T) {
	for name, crash := range map[string]bool{"the daemon hung": false, "the daemon crashed": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0, 1)
				d := newMemDaemon(f.tree, 0, 1)
				d.hung = !crash
				if crash {
					d.crashAfter = 0
				}
				defer d.close()
				ctl := retakeOnStop{&memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}, 0, 1}
				cfg := f.config(vulnerable, nil, Config{})
				cfg.hooks.OpenControl = func(context.Context) (ublkctl.Controller, error) { return ctl, nil }
				td, err := New(d, cfg)
				require.NoError(t, err)

				rep, _, _ := runFor(t, td, 60*time.Second)
				t.Log(rep.String())
				assert.NotContains(t, d.Events(), "STOP_DEV 1", "ID 1 is another server's device now")
				assert.NotContains(t, d.Events(), "DEL_DEV 1", "ID 1 is another server's device now")
				assert.True(t, f.tree.HasDisk(1) && f.tree.HasChar(1), "the other server's device 1 stays live")
				assert.Contains(t, d.Events(), "STOP_DEV 0")
				if crash {
					assert.Contains(t, d.Events(), "DEL_DEV 0")
				}
				i := slices.IndexFunc(rep.Device(1).Steps, func(s StepResult) bool { return s.Name == "STOP_DEV" })
				require.GreaterOrEqual(t, i, 0, "ublkb1's Report says why no STOP_DEV was sent: %+v", rep.Device(1).Steps)
				assert.Equal(t, "not sent: another device has ID 1 now (a new sysfs entry): the step's was deleted and the kernel gave its ID to the next ADD_DEV",
					rep.Device(1).Steps[i].Result)
			})
		})
	}
}

// A daemon on a vulnerable kernel stops its device (the disk removed,
// DEAD) and hangs before deleting it; a minute's window. The control
// fallback finds it DEAD at 55 s (no STOP_DEV), the daemon is killed at
// the kill point (58 s) with no device live, and the control's DEL_DEV
// removes the char device then. The Report says the disk was removed by
// the daemon and the char device by the control's DEL_DEV. Before, both
// said "by the daemon", the char device's once the daemon was dead.
func TestReportSaysTheControlsDelDevRemovedTheCharDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hangAfterStop = true
		defer d.close()
		td, err := New(d, f.config(vulnerable, &memControl{tree: f.tree, d: d}, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "stop 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		said := map[string]string{}
		for _, s := range rep.Device(0).Steps {
			said[s.Name] = s.Result
		}
		assert.Equal(t, "by the daemon", said["disk removed"])
		assert.Equal(t, "by the control's DEL_DEV", said["char removed"])
	})
}

// delDevRunsOn is a control device whose DEL_DEV is not complete when its
// window ends, and which the driver completes just then all the same (a
// DEL_DEV waits for the device's last release).
type delDevRunsOn struct{ *memControl }

func (c delDevRunsOn) DelDev(ctx context.Context, id int) error {
	c.d.event("DEL_DEV %d", id)
	<-ctx.Done()
	_ = c.tree.DeleteDevice(id)
	return ctx.Err()
}

// As TestReportSaysTheControlsDelDevRemovedTheCharDevice, with the
// control's DEL_DEV, sent once the daemon is killed (58 s), not complete
// when the step's window ends (60 s) and completed by the driver then. The
// Report and the log say the char device went after the control's DEL_DEV
// (sent, not seen complete), as they say of a disk after a STOP_DEV not
// seen complete. Before, they said "by the daemon", killed two seconds
// before.
func TestReportSaysACharDeviceWentAfterADelDevNotSeenComplete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hangAfterStop = true
		defer d.close()
		logs := &bytes.Buffer{}
		ctl := delDevRunsOn{&memControl{tree: f.tree, d: d}}
		cfg := f.config(vulnerable, nil, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
		cfg.hooks.OpenControl = func(context.Context) (ublkctl.Controller, error) { return ctl, nil }
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, _, _ := runFor(t, td, time.Minute)
		t.Log(rep.String())
		assert.Equal(t, []string{"request", "stop 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		require.False(t, f.tree.HasChar(0), "the driver completed the DEL_DEV")
		said := map[string]string{}
		for _, s := range rep.Device(0).Steps {
			said[s.Name] = s.Result
		}
		assert.Equal(t, "by the daemon", said["disk removed"])
		assert.Equal(t, "by the control's DEL_DEV (sent, not seen complete)", said["char removed"])
		assert.Contains(t, logs.String(), `msg="ublk: a device is gone from sysfs" device=0 by="by the control's DEL_DEV (sent, not seen complete)"`)
	})
}
