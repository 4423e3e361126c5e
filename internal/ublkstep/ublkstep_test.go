package ublkstep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// rig is device 0 of a fake sysfs held by a stacked device, dm-0, that
// lets go after release, on a kernel not known fixed, and an in-process
// daemon that deletes the device when asked to stop.
func rig(t *testing.T, release time.Duration, reserve *atomic.Int64) (*Teardown, *atomic.Int64) {
	t.Helper()
	return rigAs(t, release, reserve, func(d ublk.DaemonFuncs) ublk.Daemon { return d })
}

// rigAs is rig with its daemon given to New as as makes it.
func rigAs(t *testing.T, release time.Duration, reserve *atomic.Int64, as func(ublk.DaemonFuncs) ublk.Daemon) (*Teardown, *atomic.Int64) {
	t.Helper()
	return rigWith(t, release, reserve, as, ublk.Config{})
}

// rigWith is rigAs with cfg's fields (its Logger) in the step's Config.
func rigWith(t *testing.T, release time.Duration, reserve *atomic.Int64, as func(ublk.DaemonFuncs) ublk.Daemon, cfg ublk.Config) (*Teardown, *atomic.Int64) {
	t.Helper()
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 259, Minor: 0}))
	holders := filepath.Join(tree.Root, "block", "ublkb0", "holders")
	require.NoError(t, os.MkdirAll(holders, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(holders, "dm-0"), nil, 0o644))
	time.AfterFunc(release, func() { _ = os.Remove(filepath.Join(holders, "dm-0")) })
	var asked atomic.Int64 // when the daemon was asked to stop, since the rig's start
	start := time.Now()
	done := make(chan struct{})
	daemon := ublk.DaemonFuncs{
		StopFunc: func(context.Context) error {
			asked.Store(int64(time.Since(start)))
			if err := tree.StopDevice(0); err != nil {
				return err
			}
			if err := tree.DeleteDevice(0); err != nil {
				return err
			}
			close(done)
			return nil
		},
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	cfg = ublkhook.With(cfg, ublkhook.Hooks{SysfsRoot: tree.Root, ProcfsRoot: t.TempDir(), KernelRelease: "6.8.0-45-generic",
		OpenControl: noControl})
	td, err := New(as(daemon), cfg, func() time.Duration { return time.Duration(reserve.Load()) })
	require.NoError(t, err)
	return td, &asked
}

// noControl is the rig's control fallback: the fake kernel has no control
// device. Left at ublk's default, the last resort and the fallback opened
// the host's /dev/ublk-control, where a STOP_DEV for the fake ublkb0 would
// stop the host's device 0.
func noControl(context.Context) (ublkctl.Controller, error) {
	return nil, fmt.Errorf("%w: the rig's fake kernel has no control device", ublkctl.ErrNoControl)
}

// Fault (docs/faults.md row 1055): the servers built their ublk teardown at
// start with -grace's reserve (an hour's: 30 s) while the plan's reserve
// for the step followed the grace in use (a 30 s deletion's: 3 s). In the
// step's window of 25 s (the preserve phase over early) the teardown kept
// 30 s for its stages: the holder wait got nothing, and the last resort
// came at once, for a disk whose holder lets go 2 s in:
//
//	0 s    the step starts, 25 s to its deadline; ublkb0 held by dm-0
//	before: the last resort at 0 s, dm-0 spared (kernel state), the
//	        daemon not asked to stop: a *HeldError, the device live for
//	        the pod's SIGKILL
//	1.95 s dm-0 lets go; 2 s, the next poll: the daemon is asked to stop,
//	       the device goes
//	22 s   (the last-resort point of the 3 s reserve: never reached)
func TestStopLaysItsStagesOutFromTheReserveInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reserve atomic.Int64
		reserve.Store(int64(30 * time.Second)) // -grace 1h's, at start
		td, asked := rig(t, 1950*time.Millisecond, &reserve)
		assert.Equal(t, 30*time.Second, td.Phase().Reserve())

		reserve.Store(int64(3 * time.Second)) // the deletion's 30 s, read at SIGTERM
		assert.Equal(t, 3*time.Second, td.Phase().Reserve(), "the plan reads the reserve in use")
		assert.Equal(t, "ublk", td.Phase().Name)
		assert.True(t, td.Phase().Critical)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		rep, err := td.Stop(ctx)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Nil(t, rep.LastResort, "no last resort: the holder let go inside the holder wait")
		assert.Equal(t, 2*time.Second, time.Duration(asked.Load()), "asked to stop at the first poll (100 ms) after dm-0 let go")
		assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
		assert.False(t, td.Tighten(time.Now().Add(time.Second)), "no Stop in progress")
	})
}

// The reserve a Stop took stands while it runs; a deadline moved earlier
// reaches the Stop in progress (drain calls Tighten), which lays its stages
// out again before it: here its holder wait ends at the new last-resort
// point, 10 s minus the 3 s reserve, and the last resort runs there.
func TestTightenReachesTheStopInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reserve atomic.Int64
		reserve.Store(int64(3 * time.Second))
		td, asked := rig(t, time.Hour, &reserve)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx, cut := context.WithCancel(ctx)
		time.AfterFunc(time.Second, func() {
			assert.True(t, td.Tighten(start.Add(10*time.Second)))
			time.AfterFunc(9*time.Second, cut)
		})
		rep, err := td.Stop(ctx)
		t.Log(rep.String())
		var held *ublk.HeldError
		require.ErrorAs(t, err, &held, "dm-0 never lets go; the daemon's death is not known to stop it")
		require.NotNil(t, rep.LastResort)
		assert.Equal(t, 7*time.Second, rep.LastResort.At.Sub(start), "the last-resort point of the new deadline")
		assert.Zero(t, asked.Load(), "never asked to stop under its holder")
	})
}

// Fault (docs/faults.md row 1120): a Stop takes its reserve when it
// begins, and a reserve in use that shortened after (the supervisor's
// teardown after its server exited, begun with -grace's 30 s, then a
// SIGTERM with a 30 s deletion: 3 s) was not followed: Tighten told the
// new deadline at once, and the stages, laid out from 30 s in the 27 s
// left, took all of it. The new deadline is now told when only the reserve
// in use is left, the holder wait going on until then. Virtual time,
// dm-0 on the disk (kernel state: no kill releases it):
//
//	0 s    the Stop begins, its deadline 100 s, its reserve 30 s
//	1 s    the reserve in use 3 s, the deadline 28 s
//	before: the holder wait over, the last resort at 1 s
//	25 s   the last-resort point of 3 s before 28 s: dm-0 never lets go
//	       (or, released at 9.95 s, the daemon is asked to stop at 10 s)
func TestTightenWithAShorterReserveInUseWaitsForHoldersUntilOnlyItIsLeft(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release time.Duration
	}{{"held", time.Hour}, {"let go at 9.95 s", 9950 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reserve atomic.Int64
				reserve.Store(int64(30 * time.Second))
				td, asked := rig(t, tc.release, &reserve)
				start, rep, err := stopShortenedAt1s(t, td, &reserve)
				t.Log(rep.String())
				assert.Equal(t, start.Add(28*time.Second), rep.Deadline, "the deadline moved earlier")
				if step := rep.Step("reserve in use"); assert.NotNil(t, step, "the Report says the move was told later: %+v", rep.Steps) {
					assert.Contains(t, step.Result, "3s, the stages laid out from 30s")
				}
				if tc.release > time.Minute {
					var held *ublk.HeldError
					require.ErrorAs(t, err, &held)
					require.NotNil(t, rep.LastResort)
					assert.Equal(t, 25*time.Second, rep.LastResort.At.Sub(start), "the last-resort point of the reserve in use")
					assert.Zero(t, asked.Load(), "never asked to stop under its holder")
					return
				}
				require.NoError(t, err)
				assert.Nil(t, rep.LastResort)
				assert.Equal(t, 10*time.Second, time.Duration(asked.Load()), "asked to stop at the first poll (100 ms) after dm-0 let go")
				assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
				if moved := rep.Step("deadline moved"); assert.NotNil(t, moved, "%+v", rep.Steps) {
					assert.Equal(t, 10*time.Second, moved.Start.Sub(start), "told to the stages as the daemon was asked to stop")
				}
			})
		})
	}
}

// Told later, the deadline lays the stages out as a Teardown built with
// the reserve in use lays them out: the last resort of a Stop begun with
// 30 s, its reserve in use 3 s from 1 s on, runs where that of a Stop
// begun with 3 s does, and its window ends where that one's does.
func TestAShorterReserveToldLaterLaysTheStagesOutAsItsOwnTeardown(t *testing.T) {
	lastResort := func(t *testing.T, from time.Duration) (at, end time.Duration) {
		var rep *ublk.Report
		synctest.Test(t, func(t *testing.T) {
			var reserve atomic.Int64
			reserve.Store(int64(from))
			td, _ := rig(t, time.Hour, &reserve)
			var start time.Time
			start, rep, _ = stopShortenedAt1s(t, td, &reserve)
			require.NotNil(t, rep.LastResort)
			at = rep.LastResort.At.Sub(start)
			s := rep.Step("last resort")
			require.NotNil(t, s)
			end = s.Start.Add(s.Duration).Sub(start)
		})
		return at, end
	}
	at3, end3 := lastResort(t, 3*time.Second)
	at30, end30 := lastResort(t, 30*time.Second)
	assert.Equal(t, at3, at30, "the last-resort point")
	assert.Equal(t, end3, end30, "the last resort's end")
}

// Once the daemon was asked to stop, the holder wait is over: a deadline
// moved earlier with a shorter reserve in use is told to the stages at
// once, so that the daemon's own stop, the control fallback and the kill
// share all the time left, not only the reserve in use at its end (which
// left a STOP_DEV of 200 ms no time to complete after a force deletion).
// Virtual time, a daemon that never stops its device:
//
//	0 s  the Stop begins, its reserve 30 s; nothing holds the disk: the
//	     daemon asked to stop at once
//	1 s  the reserve in use 3 s, the deadline 28 s: told then
func TestTightenAfterTheDaemonWasAskedIsToldAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tree, err := fakeublk.NewTree(t.TempDir())
		require.NoError(t, err)
		require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 259, Minor: 0}))
		var asked atomic.Bool
		daemon := ublk.DaemonFuncs{
			StopFunc: func(context.Context) error { asked.Store(true); return nil }, // and never stops its device
			WaitFunc: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}
		var reserve atomic.Int64
		reserve.Store(int64(30 * time.Second))
		cfg := ublkhook.With(ublk.Config{NoControl: true}, ublkhook.Hooks{SysfsRoot: tree.Root, ProcfsRoot: t.TempDir(), KernelRelease: "6.8.0-45-generic"})
		td, err := New(daemon, cfg, func() time.Duration { return time.Duration(reserve.Load()) })
		require.NoError(t, err)
		time.AfterFunc(time.Second-time.Nanosecond, func() { assert.True(t, asked.Load(), "asked before the move") })
		start, rep, _ := stopShortenedAt1s(t, td, &reserve)
		t.Log(rep.String())
		assert.Equal(t, start.Add(28*time.Second), rep.Deadline)
		assert.Nil(t, rep.Step("reserve in use"), "not put off")
		if moved := rep.Step("deadline moved"); assert.NotNil(t, moved, "%+v", rep.Steps) {
			assert.Equal(t, time.Second, moved.Start.Sub(start), "told at once")
		}
	})
}

// stopShortenedAt1s runs td's Stop, its deadline 100 s away; at 1 s the
// reserve in use becomes 3 s and the deadline 28 s (a 30 s deletion read
// at a SIGTERM), where the Stop's context ends, as drain ends it. It
// returns when the Stop began, and what it returned.
func stopShortenedAt1s(t *testing.T, td *Teardown, reserve *atomic.Int64) (time.Time, *ublk.Report, error) {
	return stopShortenedAt1sReading(t, td, reserve, 3*time.Second)
}

// stopShortenedAt1sReading is stopShortenedAt1s with the reserve in use
// reading read from 1 s on.
func stopShortenedAt1sReading(t *testing.T, td *Teardown, reserve *atomic.Int64, read time.Duration) (time.Time, *ublk.Report, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	ctx, cut := context.WithCancel(ctx)
	defer cut()
	time.AfterFunc(time.Second, func() {
		reserve.Store(int64(read))
		assert.True(t, td.Tighten(start.Add(28*time.Second)), "the deadline moved earlier")
		time.AfterFunc(27*time.Second, cut)
	})
	rep, err := td.Stop(ctx)
	return start, rep, err
}

// otherDaemon is a daemon of a type of its own, as a *ublk.Socket or a
// *ublk.Process is to the step: not a ublk.DaemonFuncs.
type otherDaemon struct{ ublk.Daemon }

// Fault (docs/faults.md row 1121): the step saw the daemon asked to stop
// by wrapping a ublk.DaemonFuncs, and any other daemon (sandboxd's
// *ublk.Socket, which ublk reads the process of by its type: a wrapper
// would hide it) was told a deadline moved earlier at once, its stages
// laid out from the reserve its Stop began with. The request is now seen
// through ublk's hook, whatever the daemon's type. Virtual time, as
// TestTightenWithAShorterReserveInUseWaitsForHoldersUntilOnlyItIsLeft:
//
//	0 s     the Stop begins, its deadline 100 s, its reserve 30 s
//	1 s     the reserve in use 3 s, the deadline 28 s
//	before: the last resort at 1 s, dm-0 left held, the daemon never asked
//	9.95 s  dm-0 lets go: the daemon is asked to stop at 10 s
func TestTheStopRequestIsSeenWhateverTheDaemonsType(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reserve atomic.Int64
		reserve.Store(int64(30 * time.Second))
		td, asked := rigAs(t, 9950*time.Millisecond, &reserve, func(d ublk.DaemonFuncs) ublk.Daemon { return otherDaemon{d} })
		_, rep, err := stopShortenedAt1s(t, td, &reserve)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Nil(t, rep.LastResort)
		assert.NotNil(t, rep.Step("reserve in use"), "the move held back: %+v", rep.Steps)
		assert.Equal(t, 10*time.Second, time.Duration(asked.Load()), "asked to stop at the first poll (100 ms) after dm-0 let go")
		assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
	})
}

// Fault (docs/faults.md row 2640): a Stop whose reserve in use ublk.New
// cannot build a Teardown with runs the one built at start, and says so
// in the Report's Note; the step added that after ublk had logged the
// Report, so the "ublk teardown done" line, all an operator without the
// JSON reads of the step (row 2421), lacked it. ublk.New fails at the
// Stop here on its MeterProvider, which makes no instrument after the
// step's New (a reserve below zero, which reached the note before, now
// counts as zero: row 2761). Virtual time:
//
//	0 s     the step built with a reserve of 3 s; ublkb0 held by dm-0
//	SIGTERM the reserve reads 4 s: no Teardown from it, the start's runs
//	1.95 s  dm-0 lets go; 2 s the daemon is asked, the device goes
//	        the log line: verdict=stopped, note= the start's reserve
//	        (before: no note=)
func TestTheLogLineSaysTheStagesWereLaidOutFromTheReserveAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		var reserve atomic.Int64
		reserve.Store(int64(3 * time.Second))
		meters := &instrumentsUntil{left: 1}
		td, _ := rigWith(t, 1950*time.Millisecond, &reserve, func(d ublk.DaemonFuncs) ublk.Daemon { return d },
			ublk.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), MeterProvider: meters})
		reserve.Store(int64(4 * time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		rep, err := td.Stop(ctx)
		require.NoError(t, err)
		const why = "the teardown's stages laid out from the reserve at start, not the grace in use: ublk: Config.MeterProvider: no instrument left"
		require.Contains(t, rep.Note, why)
		var done string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "ublk teardown done") {
				done = l
			}
		}
		assert.Contains(t, done, "verdict=stopped")
		assert.Contains(t, done, why, "the log line says the Note the step added")
	})
}

// instrumentsUntil is a MeterProvider that makes left Int64Counters (one
// for each ublk.New), then fails to make any.
type instrumentsUntil struct {
	noop.MeterProvider
	mu   sync.Mutex
	left int
}

func (p *instrumentsUntil) Meter(string, ...metric.MeterOption) metric.Meter {
	return countedMeter{p: p}
}

// countedMeter is instrumentsUntil's Meter.
type countedMeter struct {
	noop.Meter
	p *instrumentsUntil
}

func (m countedMeter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	if m.p.left == 0 {
		return nil, errors.New("no instrument left")
	}
	m.p.left--
	return m.Meter.Int64Counter(name, opts...)
}

// Fault (docs/faults.md row 2760): a reserve that reads below zero at New
// is bad configuration, as deadline.NewPlan and drain.New take it (the
// plan reads the step's Phase once when it is made), and New fails then;
// but its error named ublk.Config.Reserve ("ublk: Config.Reserve must be
// >= 0, got -1s"), a field New does not use and the caller left zero, not
// the reserve it passed. A reserve that reads zero is a plan's "nothing
// reserved" (deadline.Work with no item): the step is built, its stages
// laid out from ublk's default, as a Config with no Reserve.
func TestNewRefusesANegativeReserveNamingIt(t *testing.T) {
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	cfg := ublkhook.With(ublk.Config{}, ublkhook.Hooks{SysfsRoot: tree.Root, ProcfsRoot: t.TempDir(), KernelRelease: "6.8.0-45-generic"})

	_, err = New(nil, cfg, deadline.Fixed(-time.Second))
	require.Error(t, err)
	assert.Equal(t, "ublkstep: New: the reserve must not be negative (deadline.NewPlan refuses it in the drain's plan), got -1s", err.Error())
	assert.NotContains(t, err.Error(), "Config.Reserve", "the caller's Config has none")

	td, err := New(nil, cfg, deadline.Work(func() int { return 0 }, nil, nil))
	require.NoError(t, err, "no item: nothing reserved")
	assert.Zero(t, td.Phase().Reserve(), "the plan reads the reserve as it is")
	assert.Equal(t, ublkDefaultReserve, td.base.Phase().Reserve(), "the stages laid out from ublk's default")
}

// ublkDefaultReserve is what ublk lays the stages out from for a Config
// with no Reserve.
func TestUblkDefaultReserveIsUblks(t *testing.T) {
	td, err := ublk.New(nil, ublkhook.With(ublk.Config{}, ublkhook.Hooks{KernelRelease: "6.8.0-45-generic"}))
	require.NoError(t, err)
	assert.Equal(t, ublkDefaultReserve, td.Phase().Reserve())
}

// Fault (docs/faults.md row 2761): a reserve that reads below zero at a
// Stop counts as zero (deadline.Reserve), the plan keeping no time of its
// own for the step; zero lays the stages out from ublk's default, but
// below zero ublk.New refused it, and the Stop ran the Teardown built at
// start, its stages laid out from the reserve then: an hour's grace's 30 s
// in a window of 25 s, the last resort at once (row 1055's fault), with a
// Note blaming a Config.Reserve the caller never set. Virtual time, both
// a reserve that reads zero and one that reads -1 s at the Stop:
//
//	0 s    the step built with 30 s; the Stop's window 25 s; ublkb0 held
//	       by dm-0
//	before (-1 s): the last resort at 0 s, dm-0 spared (kernel state),
//	       the daemon not asked: a *HeldError, the device live
//	1.95 s dm-0 lets go; 2 s, the next poll: the daemon is asked, the
//	       device goes
//	15 s   the last-resort point of ublk's 10 s: never reached
func TestAStopWhoseReserveReadsZeroOrBelowLaysItsStagesOutFromUblksDefault(t *testing.T) {
	for _, read := range []time.Duration{0, -time.Second} {
		t.Run(read.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reserve atomic.Int64
				reserve.Store(int64(30 * time.Second))
				td, asked := rig(t, 1950*time.Millisecond, &reserve)
				reserve.Store(int64(read))
				ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
				defer cancel()
				rep, err := td.Stop(ctx)
				t.Log(rep.String())
				require.NoError(t, err)
				assert.Nil(t, rep.LastResort, "no last resort: the holder let go inside the holder wait")
				assert.Equal(t, 2*time.Second, time.Duration(asked.Load()), "asked to stop at the first poll (100 ms) after dm-0 let go")
				assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
				assert.NotContains(t, rep.Note, "Config.Reserve")
			})
		})
	}
}

// Fault (docs/faults.md row 2762): a deadline moved earlier while a Stop
// runs is told to its stages when only the reserve in use is left before
// it, if that is shorter than the one they were laid out from; a reserve
// in use that read zero was told at the deadline itself, and one below
// zero after it: the holder wait went on into the deadline, and the last
// resort, the daemon's stop, the fallback and the kill got no time. As a
// Stop begun with it does (row 2761), the step lays the stages out from
// ublk's default (10 s) for such a reserve: told at once to a Stop begun
// with 3 s, when 10 s are left to one begun with 30 s. Virtual time,
// dm-0 on the disk, never letting go:
//
//	0 s    the Stop begins, its deadline 100 s, its reserve 3 s (or 30 s)
//	1 s    the reserve in use reads 0 (or -1 s), the deadline 28 s
//	18 s   begun with 30 s: told, the stages share the 10 s left: the
//	       last resort
//	25 s   begun with 3 s: the last-resort point of 3 s before 28 s
//	28 s   the deadline; before: no last resort at all, the deadline
//	       told to the stages then (0) or never (-1 s)
func TestAReserveInUseOfZeroOrBelowLeavesTheStagesTheirTime(t *testing.T) {
	for _, tc := range []struct {
		began, read, lastResort time.Duration
	}{
		{3 * time.Second, 0, 25 * time.Second},
		{3 * time.Second, -time.Second, 25 * time.Second},
		{30 * time.Second, 0, 18 * time.Second},
		{30 * time.Second, -time.Second, 18 * time.Second},
		{0, 3 * time.Second, 25 * time.Second}, // begun with ublk's 10 s: told when 3 s are left
	} {
		t.Run(fmt.Sprintf("began %v, read %v", tc.began, tc.read), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var reserve atomic.Int64
				reserve.Store(int64(tc.began))
				td, asked := rig(t, time.Hour, &reserve)
				start, rep, err := stopShortenedAt1sReading(t, td, &reserve, tc.read)
				t.Log(rep.String())
				assert.Equal(t, start.Add(28*time.Second), rep.Deadline, "the deadline moved earlier")
				var held *ublk.HeldError
				require.ErrorAs(t, err, &held, "dm-0 never lets go; the daemon's death is not known to stop it")
				require.NotNil(t, rep.LastResort, "the last resort ran before the deadline")
				assert.Equal(t, tc.lastResort, rep.LastResort.At.Sub(start))
				assert.Zero(t, asked.Load(), "never asked to stop under its holder")
			})
		})
	}
}
