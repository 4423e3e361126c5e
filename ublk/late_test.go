package ublk

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// 0 s: the step starts; ublkb1, listed in Config.Devices, is not in sysfs
// yet (its daemon adds it a moment later) .. 1 s: it is, live .. 95 s:
// the daemon hung, the control fallback stops the devices .. then the
// daemon is killed, on a vulnerable kernel only once neither is live.
// Before, the step took ublkb1 for gone at its first read and never read
// it again: the fallback stopped ublkb0 alone and the daemon was killed
// with ublkb1 live, the host-crash path.
func TestListedDeviceNotYetInSysfsIsFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		time.AfterFunc(time.Second+time.Millisecond, func() { // not as a read runs
			require.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1}))
		})
		ctl := &memControl{tree: f.tree, d: d, stopIn: time.Second}
		td, err := New(d, f.config(vulnerable, ctl, Config{Devices: []int{0, 1}}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 100*time.Second)
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "STOP_DEV 1", "kill", "exit killed", "DEL_DEV 0", "DEL_DEV 1"}, d.Events(),
			"killed only once STOP_DEV completed for both")
		assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
		assert.Equal(t, "gone", rep.Device(1).Initial.State())
	})
}

// 0 s: the step finds ublkb0, the one device in sysfs .. 1 s: the daemon
// adds ublkb1 (a VM's disk whose start raced the drain) .. 95 s: the
// daemon hung, the control fallback stops the devices .. then the daemon
// is killed, on a vulnerable kernel only once neither is live. Before,
// the step knew only the devices of its first read: the fallback stopped
// ublkb0 alone and the daemon was killed with ublkb1 live, the host-crash
// path.
func TestDeviceAddedAfterDiscoveryIsTheSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		time.AfterFunc(time.Second+time.Millisecond, func() { // not as a read runs
			require.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1}))
		})
		ctl := &memControl{tree: f.tree, d: d, stopIn: time.Second}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 100*time.Second)
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "STOP_DEV 1", "kill", "exit killed", "DEL_DEV 0", "DEL_DEV 1"}, d.Events(),
			"killed only once STOP_DEV completed for both")
		require.NotNil(t, rep.Device(1), "the Report accounts for the device found late")
		assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
		assert.Equal(t, "in sysfs", rep.Device(1).Steps[0].Name)
		assert.Contains(t, rep.Device(1).Steps[0].Result, "found after the step began")
	})
}

// ublkb5 is listed in Config.Devices and never in sysfs: the step saw
// nothing of it, stopped nothing, and says so (VerdictAbsent, the Note and
// the one-line summary), where it said "stopped" before, as for a device
// its daemon stopped and deleted.
func TestListedDeviceNeverInSysfsIsReportedAbsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{Devices: []int{0, 5}}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		require.NoError(t, err, "nothing was left live")
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.Equal(t, VerdictAbsent, rep.Device(5).Verdict)
		assert.Equal(t, VerdictAbsent, rep.Verdict, "the worst device verdict")
		assert.Contains(t, rep.Note, "ublkb5: listed in Config.Devices, not in sysfs at any read")
		assert.Contains(t, rep.String(), "ublkb5: gone -> gone; in flight 0 -> 0; 0 holders: absent")
	})
}

// 0 s: the daemon has added ublkb1 (ADD_DEV: its char device, no disk
// yet; the driver says DEAD) before the step begins .. 95 s: the daemon
// hung, the control fallback stops ublkb0, and GET_DEV_INFO says ublkb1
// is DEAD .. 96.5 s: the daemon starts ublkb1 (START_DEV: its disk, LIVE)
// .. the daemon is not killed on a vulnerable kernel: a disk in sysfs is
// live, whatever the driver said before. Before, the step held on to the
// DEAD it had read and killed the daemon at the kill's point with ublkb1
// live. (ADD_DEV came at 1 s here until row 1417: a device found after
// the step began with no disk is taken only once it has one, and is then
// read live. Since row 1532 a device with no disk found at discovery is
// not taken either, when the step finds its devices itself, so the step
// lists both devices (Config.Devices), which it takes disk or no disk.)
func TestADeviceStartedAfterTheDriverSaidDeadIsLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		d.kstate.set(1, ublkctl.StateDead) // ADD_DEV
		require.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1}))
		require.NoError(t, f.tree.StopDevice(1))
		time.AfterFunc(96500*time.Millisecond, func() { // START_DEV
			disk := filepath.Join(f.tree.Root, "devices/virtual/block/ublkb1")
			require.NoError(t, os.MkdirAll(disk, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(disk, "dev"), []byte("4000:1\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(disk, "inflight"), []byte("       1        0\n"), 0o644))
			d.kstate.set(1, ublkctl.StateLive)
			require.NoError(t, os.Symlink(disk, filepath.Join(f.tree.Root, "block/ublkb1")))
		})
		ctl := &memControl{tree: f.tree, d: d, stopIn: time.Second}
		td, err := New(d, f.config(vulnerable, ctl, Config{Devices: []int{0, 1}}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 100*time.Second)
		assert.NotContains(t, d.Events(), "kill", "events: %v", d.Events())
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Equal(t, []int{1}, unsafe.Devices)
		assert.Equal(t, VerdictLeftLive, rep.Device(1).Verdict)
		assert.Equal(t, "dead", rep.Device(1).Info.State, "what GET_DEV_INFO said")
	})
}

// 0 .. 2 s: the step finds ublkb0 .. then sysfs's ublk-char class cannot
// be read any more (here a file in its place, ENOTDIR: EMFILE or ENOMEM in
// the server) .. 60 s: the daemon hung on a vulnerable kernel, the step
// ends with the device left live, as last read. The Report and the error
// say that its final state is that of the last read, and why sysfs was
// not read since. Before, every read's failure was dropped: the Report
// gave a state 58 s old as the device's final one, and nothing said so.
func TestDeviceSysfsNotReadAtTheEndIsSaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		class := filepath.Join(f.tree.Root, "class", "ublk-char")
		time.AfterFunc(2*time.Second+time.Millisecond, func() { // not as a read runs
			require.NoError(t, os.Rename(class, class+".aside"))
			require.NoError(t, os.WriteFile(class, nil, 0o644))
		})
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Contains(t, rep.Note, "ublkb0: sysfs not read since +2s (")
		assert.Contains(t, rep.Note, "not a directory")
		assert.ErrorContains(t, err, "ublkb0: sysfs not read since +2s (")
	})
}

// 0 s: the step finds ublkb0; its daemon, hung on a vulnerable kernel,
// takes the stop request and does nothing .. 95 s: the control fallback
// stops ublkb0 .. 95.5 s: the daemon adds ublkb1 (a VM's disk whose start
// raced the drain), found at the next read .. ublkb1 gets STOP_DEV of its
// own, and the daemon is killed once neither is live. Before, the
// fallback ran once for the step: ublkb1, found after it, was never
// stopped, the daemon never killed, and the step ended with ublkb1
// left live for the pod's SIGKILL to kill the daemon with, the host-crash
// path (UnsafeError at 100 s).
func TestDeviceFoundAfterTheControlFallbackIsStoppedToo(t *testing.T) {
	for _, c := range []struct {
		name  string
		hung  bool // else the request fails: the fallback runs at once
		at    time.Duration
		cfg   Config
		first string
	}{
		{"hung daemon, device added after the planned fallback", true, 95500 * time.Millisecond, Config{}, "devices still live near the deadline"},
		{"listed device seen after the planned fallback", true, 95500 * time.Millisecond, Config{Devices: []int{0, 1}}, "devices still live near the deadline"},
		{"failed request, device added after the fallback", false, time.Second + time.Millisecond, Config{ExitWait: 2 * time.Second}, "the stop request failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0)
				d := newMemDaemon(f.tree, 0)
				d.hung, d.failRequest = c.hung, !c.hung
				defer d.close()
				time.AfterFunc(c.at, func() {
					require.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1}))
				})
				ctl := &memControl{tree: f.tree, d: d, stopIn: time.Second}
				td, err := New(d, f.config(vulnerable, ctl, c.cfg))
				require.NoError(t, err)
				rep, _, err := runFor(t, td, 100*time.Second)
				require.NoError(t, err)
				assert.Equal(t, []string{"request", "STOP_DEV 0", "STOP_DEV 1", "kill", "exit killed", "DEL_DEV 0", "DEL_DEV 1"}, d.Events(),
					"killed only once STOP_DEV completed for both")
				require.NotNil(t, rep.Device(1))
				assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
				assert.Equal(t, c.first, rep.Step("control fallback").Result)
			})
		})
	}
}
