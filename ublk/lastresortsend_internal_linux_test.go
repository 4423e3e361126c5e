//go:build linux

package ublk

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// sandboxd's 500 ms reserve in a 600 ms window, a vulnerable kernel, a
// hung daemon of ublkb0 and ublkb1 (it takes the stop request and does
// nothing; a STOP_DEV through the control takes 5 ms), and procfs reads
// 6 ms a process (250 of them, 1.5 s a scan: a loaded node's):
//
//	0 .. 180 ms    the holder wait's scan, cut at the kill floor (175 ms):
//	               the processes it did not read are a possible holder
//	180 ms         the last resort: nothing to kill; it scans again
//	180 .. 216 ms  its scan, cut halfway to the end of its part: the
//	               other half is its STOP_DEVs'
//	216 ms         GET_DEV_INFO and STOP_DEV of ublkb0, then of ublkb1,
//	               each done in its window
//	250 ms         the end of the last resort's part
//
// Before, the scan again ran to the end of the last resort's part (and
// the process it was reading then), and the STOP_DEVs were sent after it,
// each with its window over: "sent; not complete", the devices left to
// the control fallback's part (docs/faults.md row 3401).
func TestLastResortSendsItsStopDevsInItsPartWhateverItsScanCosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: 5 * time.Millisecond}
		cfg := f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, _, _ := runFor(t, td, 600*time.Millisecond)
		t.Log(rep.String())
		last := rep.Step("last resort")
		require.NotNil(t, last, "the last resort ran")
		partEnd := rep.Start.Add(250 * time.Millisecond)
		for _, id := range []int{0, 1} {
			stop := stepOf(rep.Device(id), "STOP_DEV")
			require.NotNil(t, stop, "ublkb%d: no STOP_DEV", id)
			assert.Equal(t, "done", stop.Result, "ublkb%d's first STOP_DEV, the last resort's", id)
			assert.True(t, stop.Start.Add(stop.Duration).Before(partEnd), "ublkb%d's STOP_DEV sent at +%v, done at +%v, past the last resort's part (+250ms)",
				id, stop.Start.Sub(rep.Start), stop.Start.Add(stop.Duration).Sub(rep.Start))
		}
		assert.Contains(t, last.Result, "STOP_DEV done for 2 device(s), sent and not complete for 0")
	})
}

// As TestLastResortSendsItsStopDevsInItsPartWhateverItsScanCosts, with
// three devices, ublkb0's STOP_DEV never completing (the hung daemon has
// I/O of it in flight, which the kernel waits for):
//
//	~216 ms       the last resort's STOP_DEVs, sent in turn: ublkb0's
//	              has a third of what is left of the part, then ublkb1's
//	              half of the rest, then ublkb2's all of it
//	250 ms        the end of the last resort's part
//
// Before, ublkb0's STOP_DEV had the part to its end, and ublkb1's and
// ublkb2's were sent after it, their windows over: "sent; not complete",
// the devices left to the control fallback's part (docs/faults.md row
// 3602).
func TestLastResortsBlockedStopDevLeavesTheOthersTheirShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1, 2)
		d := newMemDaemon(f.tree, 0, 1, 2)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: 5 * time.Millisecond, blocks: map[int]bool{0: true}}
		cfg := f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 600*time.Millisecond)
		t.Logf("%v\n%s", err, rep.String())
		require.NotNil(t, rep.Step("last resort"), "the last resort ran")
		partEnd := rep.Start.Add(250 * time.Millisecond)
		for _, id := range []int{0, 1, 2} {
			stop := stepOf(rep.Device(id), "STOP_DEV")
			require.NotNil(t, stop, "ublkb%d: no STOP_DEV", id)
			t.Logf("ublkb%d: STOP_DEV at +%v for %v: %s", id, stop.Start.Sub(rep.Start), stop.Duration, stop.Result)
		}
		for _, id := range []int{1, 2} {
			stop := stepOf(rep.Device(id), "STOP_DEV")
			assert.Equal(t, "done", stop.Result, "ublkb%d's first STOP_DEV, the last resort's", id)
			assert.True(t, stop.Start.Add(stop.Duration).Before(partEnd), "ublkb%d's STOP_DEV done in the last resort's part", id)
		}
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, a
// control device whose STOP_DEV takes 10 ms; a VMM of the pod (pid 98)
// holds ublkb0 open and, SIGKILLed, does not exit in the window (blocked
// in the kernel: its memory to free, or I/O of a disk in flight):
//
//	59.5 s     the last-resort point: pid 98 SIGKILLed
//	59.575 s   its exit no longer waited for, halfway through the part:
//	           it runs no more code, and keeps no disk from stopping
//	then       the last resort's scan, then its STOP_DEVs
//	59.65 s    the end of the last resort's part
//
// Before, the wait for its exit took the part to its end, and the
// STOP_DEVs were sent after it, their windows over: "sent; not complete",
// the shape of row 3401 (docs/faults.md row 3603).
func TestLastResortsWaitForAKilledHoldersExitLeavesItsStopDevsTheirTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{98: time.Hour})
		ctl := &memControl{tree: d.tree, d: d, stopIn: 10 * time.Millisecond}
		td.cfg.openControl = func(context.Context) (ublkctl.Controller, error) { return ctl, nil }

		rep, _, err := runFor(t, td, 60*time.Second)
		t.Logf("%v\n%s", err, rep.String())
		require.Len(t, vmms[98].sent, 1, "pid 98 SIGKILLed")
		require.NotNil(t, rep.LastResort)
		partEnd := rep.Start.Add(59650 * time.Millisecond)
		for _, id := range []int{0, 1} {
			stop := stepOf(rep.Device(id), "STOP_DEV")
			require.NotNil(t, stop, "ublkb%d: no STOP_DEV", id)
			t.Logf("ublkb%d: STOP_DEV at +%v for %v: %s", id, stop.Start.Sub(rep.Start), stop.Duration, stop.Result)
			assert.Equal(t, "done", stop.Result, "ublkb%d's first STOP_DEV, the last resort's", id)
			assert.True(t, stop.Start.Add(stop.Duration).Before(partEnd), "ublkb%d's STOP_DEV done in the last resort's part", id)
		}
	})
}
