//go:build linux

package ublk

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A poll of the step's 8 devices (refresh), each live, its sysfs read
// through a hook that counts the reads. Each poll read every device 5
// times (the char device's presence by lstat and its entry by stat; the
// disk's presence, its dev number, its inflight): 40 reads a poll, 124-300 ms
// in the loaded guest (5 ms a read there at worst), and the holder
// wait's last poll, after its scan cut at the kill floor, and the last
// resort's, right after it, took the last resort's part: its STOP_DEVs
// were sent past it (docs/faults.md row 3600). A poll reads 3 files a
// device now: one stat of the char device gives its presence and its
// entry, and the disk's dev number its presence.
func TestAPollReadsThreeFilesADevice(t *testing.T) {
	ids := []int{0, 1, 2, 3, 4, 5, 6, 7}
	f := newFixture(t, ids...)
	td, err := New(nil, f.config(vulnerable, nil, Config{}))
	require.NoError(t, err)
	r := newRun(t.Context(), td)
	devs, err := scanDevices(r.sysfs())
	require.NoError(t, err)
	r.add(devs...)
	reads := map[string]int{}
	td.cfg.beforeSysfs = func(path string) { reads[filepath.Base(path)]++ }
	r.refresh()
	t.Logf("a poll's reads: %v", reads)
	total := 0
	for _, n := range reads {
		total += n
	}
	assert.Equal(t, 3*len(ids), total, "3 reads a device: %v", reads)
	for _, d := range r.dev {
		assert.Equal(t, Device{ID: d.cur.ID, Char: true, Disk: true, Dev: fmt.Sprintf("4000:%d", d.cur.ID), Inflight: Inflight{Reads: 3, Writes: 1}}, d.cur, "read as before")
		assert.NotZero(t, d.entry)
	}
}

// eightDevicesOfAHungDaemon runs the step over the node of
// TestAPollReadsEachDevicesSysfsOnlyForWhatChanges, each sysfs read (and
// each of procfs's jbd2 directory) going through beforeRead.
func eightDevicesOfAHungDaemon(t *testing.T, ids []int, beforeRead func(path string)) (*Report, time.Duration, error) {
	t.Helper()
	f := newFixture(t, ids...)
	d := newMemDaemon(f.tree, ids...)
	d.hung = true
	t.Cleanup(d.close)
	ctl := &memControl{tree: f.tree, d: d, stopIn: 5 * time.Millisecond}
	cfg := f.config(vulnerable, ctl, Config{Reserve: time.Second, RequestTimeout: 200 * time.Millisecond, ExitWait: 200 * time.Millisecond})
	cfg.hooks.BeforeProcess = slowProcfs(t, f, 355, 3200*time.Microsecond)
	td, err := New(d, cfg)
	require.NoError(t, err)
	td.cfg.beforeSysfs = beforeRead
	return runFor(t, td, 2*time.Second)
}

// The node of eightDevicesOfAHungDaemon, with only the holders scan's
// reads of sysfs's loop devices and file systems and of procfs's jbd2
// journals slow, 5 ms each: 57 reads for 8 devices (the
// guest's: 187 ms a scan). They came after the scan of procfs, with no
// stage clock: the holder wait's last scan, cut at the kill floor
// (+1.15 s), read them on to +1.42 s, past the middle of the last
// resort's part into its STOP_DEVs' half. They are read first now, each
// only while the stage lasts, and the holder wait ends at the kill floor
// (docs/faults.md row 3601).
func TestTheHoldersScansSysfsReadsKeepTheStagesClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := 0
		rep, took, err := eightDevicesOfAHungDaemon(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, func(path string) {
			if strings.Contains(path, "/loop/") || strings.Contains(path, "/fs/") {
				slow++
				time.Sleep(5 * time.Millisecond)
			}
		})
		t.Logf("took %v, %d slow reads, err %v\n%s", took, slow, err, rep.String())
		holders := rep.Step("holders")
		require.NotNil(t, holders)
		t.Logf("holder stage ended at +%v", holders.Start.Add(holders.Duration).Sub(rep.Start))
		killFloor := rep.Start.Add(1150 * time.Millisecond)
		assert.WithinDuration(t, killFloor, holders.Start.Add(holders.Duration), 5*time.Millisecond,
			"the holder wait's last scan ends at the kill floor, its sysfs reads in it, at +%v", holders.Start.Add(holders.Duration).Sub(rep.Start))
	})
}
