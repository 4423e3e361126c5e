//go:build linux

package ublk

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// Two ublk servers on one node, on a vulnerable kernel with the control
// fallback, in a minute's window (the holder wait's scans end at 51.5 s,
// the deadline at 60 s): the step's daemon (pid 4242, its PID known)
// serves ublkb0; another server, pid 77 in another pod's cgroup, has
// /dev/ublkc1 open and serves ublkb1, live. The procfs pass that tells
// them apart is as slow as a loaded node's (in virtual time, before it
// reads this process's cgroup: 1.0-1.47 s in a QEMU guest at load 18-21).
//
// The pass at discovery has the time the holder wait has, to the kill
// floor: at 1.5 s it tells ublkb1 another server's, left alone. Before, it
// had 1 s, and cut short it took ublkb1 for the daemon's: the daemon
// stopped ublkb0 and exited, and the control fallback ran STOP_DEV and
// DEL_DEV on ublkb1 under its server (docs/faults.md row 1122).
//
// A pass that runs past the kill floor tells nothing: ublkb1 is then not
// known to be the daemon's; the step waits for it, but the control
// fallback passes again first, and leaves it alone once told another
// server's (row 1123). Never told in the step's time, the control neither
// stops nor deletes it, and its Report entry, the Report's note, the log
// and the error say so (row 1124); with the daemon hung, the fallback
// looks at it once, not again and again with no sleep between.
func TestSlowProcfsPassNeverGivesAnotherServersDeviceToTheControl(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	for name, tc := range map[string]struct {
		slow   []time.Duration // each pass reads this process's cgroup that long after the step's start, at the earliest; the last for every later pass
		hung   bool            // the daemon takes the request and does nothing
		untold bool
	}{
		"told in the holder wait's time":     {[]time.Duration{1500 * time.Millisecond, 0}, false, false},
		"told by the fallback's second pass": {[]time.Duration{52 * time.Second, 0}, false, false},
		"not told in the step's time":        {[]time.Duration{52 * time.Second, time.Minute + time.Millisecond}, false, true},
		"not told, the daemon hung":          {[]time.Duration{52 * time.Second, 59 * time.Second}, true, true},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				td, d, f := twoServers(t, tc.slow, tc.hung)
				rep, _, err := runFor(t, td, time.Minute)
				t.Log(rep.String())
				events := d.Events()
				assertLeftAlone(t, events, f)
				if !tc.hung {
					assert.Contains(t, events, "stop 0", "the daemon stopped its own")
				}
				require.NotNil(t, rep.Device(0))
				assert.False(t, f.tree.HasDisk(0), "the daemon's device stopped") // by the last resort when the pass took the holder wait's time
				if !tc.untold {
					require.NoError(t, err)
					assert.Nil(t, rep.Device(1), "another server's: not the step's")
					assert.Contains(t, rep.Note, "ublkb1: its /dev/ublkc1 is open in pid 77 (")
					return
				}
				dev := assertUntold(t, rep)
				assert.Contains(t, rep.Note, "ublkb1: not known to be the daemon's")
				assert.Contains(t, rep.Note, "the control neither stopped nor deleted it")
				assert.Error(t, err, "a device left live, not known whose, is not a clean stop")
				if tc.hung {
					assert.Equal(t, VerdictLeftLive, dev.Verdict, "counted live: the daemon, which may serve it, not killed")
					assert.NotContains(t, events, "kill")
				}
			})
		})
	}
}

// twoServers makes the step of TestSlowProcfsPassNeverGivesAnotherServersDeviceToTheControl
// (the daemon, pid 4242, serves ublkb0; pid 77, another server in another
// pod's cgroup, serves ublkb1), each procfs pass reading this process's
// cgroup no sooner than slow's entry for it (the last for every later
// pass) after now; hung makes the daemon take the request and do
// nothing. It returns the Teardown, the daemon and the fixture.
func twoServers(t *testing.T, slow []time.Duration, hung bool) (*Teardown, *memDaemon, *fixture) {
	t.Helper()
	f := newFixture(t, 0) // ublkb0: no char number in sysfs, the step's
	makeServed(t, f, servedChar{id: 1, charMajor: 4087, salt: 43, inSysfs: true,
		procs: []fakeProc{{"self", "podA", false}, {"4242", "podA", false}, {"77", "podB", true}}})
	d := newMemDaemon(f.tree, 0)
	d.hung = hung
	t.Cleanup(d.close)
	ctl := &memControl{tree: f.tree, d: d}
	daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
	cfg := f.config(vulnerable, ctl, Config{})
	start, passes := time.Now(), 0
	cfg.hooks.BeforeProcess = func(dir string) {
		if filepath.Base(dir) == "self" {
			if passes == 10 {
				t.Error("a pass again and again: the fallback, called for the device it left alone, ran with no sleep between")
				select {} // the bubble's deadlock ends the test
			}
			time.Sleep(time.Until(start.Add(slow[min(passes, len(slow)-1)])))
			passes++
		}
	}
	td, err := New(daemon, cfg)
	require.NoError(t, err)
	return td, d, f
}

// assertLeftAlone asserts that ublkb1, another server's device (told so
// or not), is live, and that the control neither stopped nor deleted it.
func assertLeftAlone(t *testing.T, events []string, f *fixture) {
	t.Helper()
	assert.NotContains(t, events, "STOP_DEV 1", "the other server's device was stopped")
	assert.NotContains(t, events, "DEL_DEV 1", "the other server's device was deleted")
	assert.True(t, f.tree.HasDisk(1), "the other server's device stays live")
}

// assertUntold asserts that the Report accounts for ublkb1 as a device
// the procfs pass did not tell from another server's, and returns its
// entry.
func assertUntold(t *testing.T, rep *Report) *DeviceReport {
	t.Helper()
	dev := rep.Device(1)
	require.NotNil(t, dev, "not told: the step's to account for")
	require.NotEmpty(t, dev.Steps, "the Report says the device was not told")
	assert.Equal(t, "whose", dev.Steps[0].Name)
	assert.Contains(t, dev.Steps[0].Result, "not told from another server's device: the procfs pass ended")
	return dev
}

// The step of TestSlowProcfsPassNeverGivesAnotherServersDeviceToTheControl
// whose pass at discovery runs past the kill floor (52 s): neither device
// is told, the holder wait's scan reads no process, and the last resort
// sets aside the possible holder of both disks (the processes not read).
// It stops ublkb0, the daemon's; ublkb1, not known to be the daemon's, is
// the control's to stop only once told: the fallback's pass tells it
// another server's, left alone, or never tells it, left live. The holder
// set aside from ublkb1 says so, and what the Report says of ublkb1 is
// what happened to it. Before, its fate said "set aside, the disk stops
// all the same", as ublkb0's, while ublkb1 stayed live.
func TestLastResortSaysADiskNotKnownToBeTheDaemonsDoesNotStop(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	for name, tc := range map[string]struct {
		slow []time.Duration
		says []string // what ublkb1's fate says
	}{
		"told another server's later": {[]time.Duration{52 * time.Second, 0},
			[]string{"not known to be the daemon's", "then told another server's device (its /dev/ublkc1 is open in pid 77 (", "not the step's, not stopped"}},
		"never told": {[]time.Duration{52 * time.Second, time.Minute + time.Millisecond},
			[]string{"not known to be the daemon's", "the control does not stop it"}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				td, _, f := twoServers(t, tc.slow, false)
				rep, _, _ := runFor(t, td, time.Minute)
				t.Log(rep.String())
				require.True(t, f.tree.HasDisk(1), "ublkb1 stays live")
				require.False(t, f.tree.HasDisk(0), "ublkb0 stopped")
				require.NotNil(t, rep.LastResort)
				var fates []HolderFate
				for _, h := range rep.LastResort.Holders {
					if h.Device == 1 {
						fates = append(fates, h)
						assert.NotContains(t, h.Reason, "stops all the same", "ublkb1 does not stop")
						for _, s := range tc.says {
							assert.Contains(t, h.Reason, s)
						}
					} else {
						assert.Contains(t, h.Reason, "set aside, the disk stops all the same", "ublkb0 stops: STOP_DEV by the last resort")
					}
				}
				require.NotEmpty(t, fates, "the possible holder of ublkb1 is in the last resort's account")
			})
		})
	}
}

//	0 s    the step of TestSlowProcfsPassNeverGivesAnotherServersDeviceToTheControl
//	       begins with a minute's window: the pass that tells ublkb1
//	       (another pod's server, pid 77, and 199 children it forked,
//	       which inherit its open /dev/ublkc1) from the daemon's has until
//	       the kill floor, 51.5 s; procfs is slow (each cgroup read of
//	       theirs 100 ms: 20 s for the pass)
//	1 s    the pod is deleted with a shorter grace: the deadline moves to
//	       5 s (Tighten), and drain ends the step's context there
//	~2.8 s the new kill floor: the pass ends, ublkb1 not told (the control
//	       never stops it); the daemon is asked to stop, and stops ublkb0
//
// Before, the pass kept the end it began with, 51.5 s: at 20 s it told
// ublkb1 another's, and only then was the daemon asked to stop, 15 s
// after the pod's SIGKILL was due: it would have died with ublkb0 live.
func TestDeadlineMovedEarlierEndsThePassThatTellsAnotherServersDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		td, d, f := twoServers(t, []time.Duration{0}, false)
		node, err := os.Readlink(filepath.Join(f.proc, "77", "fd", "3"))
		require.NoError(t, err)
		for pid := 1000; pid < 1199; pid++ {
			fakeProcess(t, f.proc, strconv.Itoa(pid), "0::/kubepods/podB/ctr\n", node)
		}
		td.cfg.beforeProcess = func(dir string) {
			if filepath.Base(dir) != "self" {
				time.Sleep(100 * time.Millisecond)
			}
		}
		d.step = 100 * time.Millisecond
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ctx, cut := context.WithCancelCause(ctx)
		dl := start.Add(5 * time.Second)
		time.AfterFunc(time.Second, func() { // as drain's followBudget does
			assert.True(t, td.Tighten(dl))
			time.AfterFunc(time.Until(dl), func() { cut(errBudgetMoved) })
		})
		rep, err := td.Stop(ctx)
		t.Log(rep.String())
		assertLeftAlone(t, d.Events(), f)
		req := rep.Step("request stop")
		require.NotNil(t, req, "the daemon asked to stop")
		assert.Less(t, req.Start.Sub(start), 5*time.Second, "asked before the deadline")
		assert.False(t, f.tree.HasDisk(0), "ublkb0 stopped")
		assertUntold(t, rep)
		assert.Error(t, err, "a device left live, not known whose, is not a clean stop")
	})
}

//	0 s    the step of TestSlowProcfsPassNeverGivesAnotherServersDeviceToTheControl,
//	       its last resort off, with a daemon that takes the request and
//	       does nothing; the pass at discovery ends at the kill floor
//	       (51.5 s) before it tells ublkb1: not known to be the daemon's
//	55 s   the control fallback: STOP_DEV on ublkb0, the daemon's, then
//	       the pass again for ublkb1, until the kill's part (58 s): procfs
//	       is slow, it reaches this process's cgroup at 59 s
//
// Before, the fallback passed again first, and sent ublkb0's STOP_DEV
// only once that pass was over, at 59 s, with no time left in its window:
// not seen complete, ublkb0 live, for the pod's SIGKILL to kill its hung
// daemon with.
func TestFallbackStopsTheDaemonsDevicesBeforeItPassesAgain(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		td, d, f := twoServers(t, []time.Duration{52 * time.Second, 59 * time.Second}, true)
		td.cfg.lastResortOff = true
		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		assert.Error(t, err, "ublkb1, not known whose, left live")
		assert.Equal(t, []string{"request", "STOP_DEV 0"}, d.Events(), "ublkb1 neither stopped nor deleted")
		assert.True(t, f.tree.HasDisk(1))
		dev := rep.Device(0)
		require.NotNil(t, dev)
		i := slices.IndexFunc(dev.Steps, func(s StepResult) bool { return s.Name == "STOP_DEV" })
		require.GreaterOrEqual(t, i, 0)
		assert.Equal(t, "done", dev.Steps[i].Result, "complete in its window")
		assert.Equal(t, 55*time.Second, dev.Steps[i].Start.Sub(rep.Start), "at the fallback's point, before the pass")
		assert.Empty(t, dev.Pending)
		assert.NotEqual(t, VerdictLeftLive, dev.Verdict, "ublkb0 stopped")
	})
}

// sandboxd's reserve, 500 ms, in a 600 ms window (the control fallback at
// 350 ms, the kill's part from 500 ms), a vulnerable kernel, the daemon's
// PID known; it takes the request at once and hangs.
//
//	250 ms another pod's server adds ublkb1 and forks 199 children, which
//	       inherit its open /dev/ublkc1; procfs is slow (each cgroup read
//	       of theirs 10 ms: a 2 s pass)
//	300 ms the wait loop finds ublkb1: the pass that tells whose it is
//	       ends with the stage the step is in, at the fallback's point
//	350 ms the control fallback: STOP_DEV on ublkb0 (50 ms to drain);
//	       ublkb1, not told, is not the control's
//
// Before, a device found after the kill floor got a pass of ownersWait
// (1 s), up to the deadline: the wait loop was held in it to 610 ms, and
// the fallback's STOP_DEV came after its window, not seen complete,
// ublkb0 left live under its hung daemon.
func TestAPassForADeviceFoundLateEndsWithTheStageItRunsIn(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		spec, node := makeServed(t, f, servedChar{id: 1, charMajor: 4087, salt: 45, procs: stepAndDaemon})
		go func() {
			time.Sleep(250 * time.Millisecond) // between two polls
			for pid := 77; pid < 277; pid++ {
				fakeProcess(t, f.proc, strconv.Itoa(pid), "0::/kubepods/podB/ctr\n", node)
			}
			assert.NoError(t, f.tree.AddDevice(spec))
		}()
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: 50 * time.Millisecond}
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		cfg := f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = func(dir string) {
			if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil && pid >= 77 && pid < 277 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		td, err := New(daemon, cfg)
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 600*time.Millisecond)

		t.Log(rep.String())
		assert.Error(t, err, "ublkb1, not known whose, left live")
		events := d.Events()
		assert.Contains(t, events, "STOP_DEV 0", "the fallback stopped the daemon's device")
		assertLeftAlone(t, events, f)
		dev := rep.Device(0)
		require.NotNil(t, dev)
		assert.NotEqual(t, VerdictLeftLive, dev.Verdict, "ublkb0 stopped")
		assertUntold(t, rep)
	})
}

// A vulnerable kernel, a minute's window (the default reserve: the
// control fallback at 55 s, the kill's part from 58 s), the daemon's PID
// not known; it takes the request and hangs with ublkb0's I/O, so the
// fallback's STOP_DEV on ublkb0 never completes, the daemon is not
// killed with ublkb0 live, and the step polls on to the deadline.
//
//	58.5 s the daemon adds ublkb1 (a VM start that raced the drain); the
//	       pass that tells whose it is has the rest of the kill's part,
//	       which no kill took (ownersWait at most): procfs is quick, and
//	       ublkb1 is the daemon's, its STOP_DEV sent by the fallback
//
// Before, the pass ended with the control's stage, at 58 s, over before
// it began: ublkb1 not told, the control never sent its STOP_DEV, and it
// was left live for the pod's SIGKILL with the hung daemon.
func TestAPassForADeviceFoundPastTheKillPointHasTheKillsPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		fakeProcess(t, f.proc, "self", "0::/kubepods/podA/ctr\n", "")
		time.AfterFunc(58500*time.Millisecond+time.Millisecond, func() { // not as a read runs
			assert.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4087, CharMinor: 1}))
		})
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, drainBlocks: true}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		assert.Error(t, err, "ublkb0 and ublkb1 left live under the hung daemon")
		events := d.Events()
		assert.NotContains(t, events, "kill", "not killed with a live device")
		assert.Contains(t, events, "STOP_DEV 1", "the fallback sent STOP_DEV to the daemon's device found late")
		dev := rep.Device(1)
		require.NotNil(t, dev, "the Report accounts for the device found late")
		assert.False(t, slices.ContainsFunc(dev.Steps, func(s StepResult) bool { return s.Name == "whose" }), "told the daemon's: %v", dev.Steps)
	})
}

// The daemon, pid 4242, serves ublkb0 and ublkb1 (its /dev/ublkc1 open in
// pid 4243, a per-device server of its in the server's cgroup, as ublksrv
// forks: only a walk of procfs tells it the daemon's, where a /dev/ublkcN
// open in the daemon itself is told at once), and its stop request fails;
// a vulnerable kernel, procfs slow:
//
//	no deadline, cancelled at 5 s:
//	0 .. 2 s  the pass at discovery reaches this process's cgroup at 2 s,
//	          past its 1 s (ownersWait): ublkb1 not told the daemon's
//	2 s       the stop request fails: the control fallback stops ublkb0,
//	          then passes again for ublkb1, reaching the cgroup at 30 s
//	5 s       the step is cancelled
//
//	a minute's deadline, cancelled at 56 s: the same, the pass at
//	discovery cut at the kill floor (53 s), the fallback's pass reaching
//	the cgroup at 57.5 s, before the kill point (58 s)
//
// The fallback's pass ends with the step: it tells ublkb1 nothing, and
// the control leaves ublkb1 alone. Before, that pass had the kill point
// as its only end, none without a deadline, and was not cancelled with
// the step: it told ublkb1 the daemon's at 30 s (57.5 s), and the control
// sent its STOP_DEV then, 25 s (1.5 s) after the step's end, where the
// daemon may be SIGKILLed.
func TestFallbacksSecondPassEndsWithTheStep(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the daemon holds")
	}
	for name, tc := range map[string]struct {
		deadline, cancel time.Duration // deadline 0: none
		slow             []time.Duration
	}{
		"no deadline":         {0, 5 * time.Second, []time.Duration{2 * time.Second, 30 * time.Second}},
		"a minute's deadline": {time.Minute, 56 * time.Second, []time.Duration{53 * time.Second, 57500 * time.Millisecond}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0)
				makeServed(t, f, servedChar{id: 1, charMajor: 4085, salt: 47, inSysfs: true,
					procs: []fakeProc{{"self", "podA", false}, {"4242", "podA", false}, {"4243", "podA", true}}})
				d := newMemDaemon(f.tree, 0, 1)
				d.failRequest = true
				t.Cleanup(d.close)
				daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
				cfg := f.config(vulnerable, &memControl{tree: f.tree, d: d}, Config{})
				start, passes := time.Now(), 0
				cfg.hooks.BeforeProcess = func(dir string) {
					if filepath.Base(dir) == "self" {
						time.Sleep(time.Until(start.Add(tc.slow[min(passes, len(tc.slow)-1)])))
						passes++
					}
				}
				td, err := New(daemon, cfg)
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(t.Context())
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(t.Context(), tc.deadline)
				}
				defer cancel()
				time.AfterFunc(tc.cancel, cancel)

				rep, _ := td.Stop(ctx)
				t.Log(rep.String())
				assert.Contains(t, d.Events(), "STOP_DEV 0", "the daemon's own, stopped by the fallback")
				assert.NotContains(t, d.Events(), "STOP_DEV 1", "no STOP_DEV after the step's end")
				assert.True(t, f.tree.HasDisk(1), "ublkb1 left alone")
				dev := rep.Device(1)
				require.NotNil(t, dev)
				require.Len(t, dev.Steps, 2, "%+v", dev.Steps)
				assert.Equal(t, "still not told from another server's device when the pass ended: the control fallback leaves it alone", dev.Steps[1].Result)
			})
		})
	}
}

// The daemon, pid 4242, hung on a vulnerable kernel, serves ublkb0; the
// step finds its devices itself (no Config.Devices); a minute's window.
// Another pod's server (pid 77, in another pod's cgroup) adds ublkb1
// during the drain:
//
//	30 s    ADD_DEV: ublkb1's char device, no disk, open in no process yet
//	31 s    pid 77 opens /dev/ublkc1 and starts ublkb1 (its disk appears)
//	55 s    the control fallback stops ublkb0
//
// The step takes no device it cannot tell: found with no disk and its char
// device open in no process, ublkb1 is looked at again, and once it has a
// disk the pass tells it another server's: left alone, live, its server
// untouched. Before, ublkb1 was taken at 30 s as the daemon's ("found after
// the step began, dead"), and the control fallback sent it STOP_DEV at 55 s
// and DEL_DEV once the daemon was killed: another server's live disk
// stopped and deleted under it.
func TestDeviceFoundBeforeItsServerOpenedItIsToldOnceStarted(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		spec, node := makeServed(t, f, servedChar{id: 1, charMajor: 4079, salt: 61, procs: stepAndDaemon})
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		t.Cleanup(d.close)
		time.AfterFunc(30*time.Second, func() { assert.NoError(t, f.tree.AddChar(spec)) })
		time.AfterFunc(31*time.Second, func() {
			fakeProcess(t, f.proc, "77", "0::/kubepods/podB/ctr\n", node)
			assert.NoError(t, f.tree.StartDevice(spec))
		})
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		td, err := New(daemon, f.config(vulnerable, &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assertLeftAlone(t, d.Events(), f)
		assert.Contains(t, d.Events(), "STOP_DEV 0")
		assert.Nil(t, rep.Device(1), "not the step's")
		assert.Contains(t, rep.Note, "ublkb1: its /dev/ublkc1 is open in pid 77 (")
	})
}

// As TestDeviceFoundBeforeItsServerOpenedItIsToldOnceStarted, with
// ublkb1's ADD_DEV before the step begins:
//
//	0 s     ublkb1's char device, no disk, open in no process yet
//	1 s     pid 77 opens /dev/ublkc1 and starts ublkb1 (its disk appears)
//	55 s    the control fallback stops ublkb0
//
// Discovery takes no disk-less device it cannot tell either: ublkb1 is
// looked at again, and once it has a disk the pass tells it another
// server's: left alone, live, its server untouched. Before, discovery took
// it as the daemon's, and the control fallback sent it STOP_DEV at 55 s
// and DEL_DEV once the daemon was killed.
func TestDeviceDiscoveredBeforeItsServerOpenedItIsToldOnceStarted(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		spec, node := makeServed(t, f, servedChar{id: 1, charMajor: 4075, salt: 63, procs: stepAndDaemon})
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		t.Cleanup(d.close)
		require.NoError(t, f.tree.AddChar(spec))
		d.kstate.set(1, ublkctl.StateDead) // added, not started
		time.AfterFunc(time.Second, func() {
			fakeProcess(t, f.proc, "77", "0::/kubepods/podB/ctr\n", node)
			assert.NoError(t, f.tree.StartDevice(spec))
			d.kstate.set(1, ublkctl.StateLive)
		})
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		td, err := New(daemon, f.config(vulnerable, &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assertLeftAlone(t, d.Events(), f)
		assert.Contains(t, d.Events(), "STOP_DEV 0")
		assert.Nil(t, rep.Device(1), "not the step's")
		assert.Contains(t, rep.Note, "ublkb1: no disk yet (added and not started, or stopping or stopped): the step's only once it has one")
		assert.Contains(t, rep.Note, "ublkb1: its /dev/ublkc1 is open in pid 77 (")
	})
}
