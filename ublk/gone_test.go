package ublk

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The daemon crashes after its first device and leaves ublkb1. The
// control fallback reads sysfs (ublkb1 there, disk and char), then asks
// the driver, GET_DEV_INFO; in between, someone else deletes the device
// (an operator's `ublk del`, the next pod's cleanup). The driver answers
// ENODEV: no device has the ID, so ublkb1 is gone, which is what the
// step set out to do, not a read that failed. The step says it gone,
// sends it nothing more, and logs no warning; the device's verdict is
// stopped, the step's error nil.
//
//	0s   request; the daemon stops and deletes ublkb0 (2 s), then crashes
//	     sysfs read: ublkb1 live
//	     ublkb1 deleted by someone else
//	     GET_DEV_INFO 1: ENODEV  -> gone
func TestADeviceDeletedBetweenSysfsAndGETDEVINFOIsGoneNotAFailedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, deletedBeforeInfo: map[int]bool{1: true}}
		var logs bytes.Buffer
		td, err := New(d, f.config(fixed, ctl, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Device(1).Verdict)

		info := stepOf(rep.Device(1), "GET_DEV_INFO")
		require.NotNil(t, info, "the fallback asked the driver")
		assert.Empty(t, info.Err, "a device the driver has no more is not a failed read")
		assert.Contains(t, info.Result, "gone")
		for _, s := range rep.Device(1).Steps {
			assert.NotContains(t, []string{"kept for recovery", "STOP_DEV", "DEL_DEV"}, s.Name, "%s: %s", s.Name, s.Result)
		}
		assert.NotContains(t, d.Events(), "STOP_DEV 1")
		assert.NotContains(t, d.Events(), "DEL_DEV 1")
		for _, l := range strings.Split(logs.String(), "\n") {
			warnsOfIt := strings.Contains(l, "level=WARN") && (strings.Contains(l, "device=1 ") || strings.Contains(l, "device=ublkb1 "))
			assert.False(t, warnsOfIt, "a warning for a device that went: %s", l)
		}
	})
}

// stepOf returns d's first step named name, or nil.
func stepOf(d *DeviceReport, name string) *StepResult {
	for i := range d.Steps {
		if d.Steps[i].Name == name {
			return &d.Steps[i]
		}
	}
	return nil
}

// As in TestADeviceDeletedBetweenSysfsAndGETDEVINFOIsGoneNotAFailedRead,
// at the last resort: ublkb0, held by kernel state (dm-0) whose daemon
// dies with the pod, is to be stopped under its holder, and is deleted by
// someone else between the holder scan and the GET_DEV_INFO that reads
// its flags. The driver's ENODEV says it gone: not "left live (its flags
// not read)", not a device held at the step's end.
func TestAHeldDeviceDeletedBeforeTheLastResortReadsItIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, d, _, td := lastResortRig(t, vulnerable, Config{})
		doomedDaemon(td)
		f.hold(t, 0, "dm-0")
		ctl, err := td.cfg.openControl(t.Context())
		require.NoError(t, err)
		ctl.(*memControl).deletedBeforeInfo = map[int]bool{0: true}
		rep, _, err := runFor(t, td, 60*time.Second)
		t.Log(rep.String())
		require.NoError(t, err, "nothing held, nothing left live")
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.NotContains(t, rep.Step("last resort").Result, "left live")
		info := stepOf(rep.Device(0), "GET_DEV_INFO")
		require.NotNil(t, info)
		assert.Empty(t, info.Err)
		assert.Contains(t, info.Result, "gone")
		assert.NotContains(t, d.Events(), "STOP_DEV 0")
	})
}

// The daemon crashes after its first device and leaves ublkb1, whose disk
// something still has open (a VMM's fd the driver's removal of the disk
// does not close). The control fallback stops ublkb1 and sends DEL_DEV,
// which the driver runs as the real one does: it removes the device (its
// char device and disk leave sysfs, it is marked deleted), then waits for
// its last reference, the open disk, before it frees the ID. Nothing the
// step does makes that come: the driver frees the device on its own at the
// last close. So the step stops waiting once the char device has left
// sysfs, and says so, instead of waiting to its deadline.
//
//	0s   request; the daemon stops and deletes ublkb0
//	2s   it crashes: ublkb1 live; STOP_DEV 1, DEL_DEV 1 (removed at once)
//	     the DEL_DEV waits for the last reference, which never goes
//	2s + a poll: the step ends (before: at its deadline, 60 s)
func TestADelDevThatRemovedTheDeviceIsNotWaitedForItsLastReference(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, lastRefHeld: map[int]bool{1: true}}
		td, err := New(d, f.config(fixed, ctl, Config{}))
		require.NoError(t, err)
		rep, took, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.LessOrEqual(t, took, 2*time.Second+td.cfg.poll, "ends once the device is removed, not at its deadline")
		del := stepOf(rep.Device(1), "DEL_DEV")
		require.NotNil(t, del)
		assert.Empty(t, del.Err)
		assert.Contains(t, del.Result, "removed")
		assert.Contains(t, del.Result, "last reference")
		assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
		assert.Empty(t, rep.Device(1).Pending)
	})
}
