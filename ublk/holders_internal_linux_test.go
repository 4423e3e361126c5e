//go:build linux

package ublk

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// busyRing writes a fake /proc/42, "spdk", with an io_uring at fd 9 whose
// registered files the kernel does not list (the ring's lock was held at
// every read: "UserFiles: 2" and no slot lines), and returns its fdinfo.
func busyRing(t *testing.T, f *fixture) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.proc, "42", "comm"), []byte("spdk\n"), 0o644))
	require.NoError(t, os.Symlink("anon_inode:[io_uring]", filepath.Join(f.proc, "42", "fd", "9")))
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "42", "fdinfo"), 0o755))
	info := filepath.Join(f.proc, "42", "fdinfo", "9")
	require.NoError(t, os.WriteFile(info, []byte("SqThread:\t-1\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n"), 0o644))
	return info
}

// 0 .. a process's io_uring is busy: the kernel does not list its
// registered files, so it may hold the disk (a possible holder); the step
// scans again every PollInterval .. 2 s: the ring is listed at last, and
// holds nothing .. the next scan finds no holder, and the daemon is asked
// to stop then. Before, the step went on at 0, naming the process only in
// the holders step's error, and asked the daemon to stop under a ring that
// might hold the disk.
func TestStepWaitsForAPossibleHolderUntilItsRingIsListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		info := busyRing(t, f)
		go func() {
			time.Sleep(2 * time.Second)
			idle := info + ".idle"
			if os.WriteFile(idle, []byte("UserFiles:\t0\nUserBufs:\t0\n"), 0o644) == nil {
				_ = os.Rename(idle, info)
			}
		}()
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 3600*time.Second)
		require.NoError(t, err)
		h, req := rep.Step("holders"), rep.Step("request stop")
		require.NotNil(t, h)
		require.NotNil(t, req)
		assert.Equal(t, "no holders", h.Result)
		assert.Empty(t, h.Err)
		assert.GreaterOrEqual(t, req.Start.Sub(rep.Start), 2*time.Second, "not asked while the ring may hold the disk")
		assert.Less(t, req.Start.Sub(rep.Start), 2*time.Second+2*td.cfg.poll, "asked at the first scan after it is listed")
		require.NotEmpty(t, rep.Device(0).Holders)
		p := rep.Device(0).Holders[0]
		assert.Equal(t, Holder{PID: 42, Comm: "spdk", Kind: blockdev.Possible, Detail: p.Detail}, p, "the Report names who was waited for")
		assert.Contains(t, p.Detail, "io_uring fd 9: the registered files not listed")
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// A ring the kernel never lists through the holder wait (its lock held all
// along) is waited for to the end of the wait, then set aside: with the
// last resort off nothing is killed, and the daemon is asked to stop all
// the same, the Report's "possible holders" step naming the process once
// however many numbers the disk has. Before, the daemon was asked at once;
// in the first version of the rule, never (HeldError), leaving it to die
// with the disk live.
func TestStepSetsAsideAPossibleHolderAtTheEndOfTheHolderWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		busyRing(t, f)
		part := filepath.Join(f.tree.Root, "block", "ublkb0", "ublkb0p1") // a partition: a second number
		require.NoError(t, os.MkdirAll(part, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(part, "dev"), []byte("4001:1\n"), 0o644))
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{HolderWait: 2 * time.Second, NoLastResort: true}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.Contains(t, h.Err, "still held open")
		aside, req := rep.Step("possible holders"), rep.Step("request stop")
		require.NotNil(t, aside)
		require.NotNil(t, req)
		assert.Equal(t, "1 process(es) set aside", aside.Result, "listed once, however many numbers the disk has")
		assert.Contains(t, aside.Err, "pid 42 (spdk) possible io_uring fd 9: the registered files not listed")
		assert.GreaterOrEqual(t, req.Start.Sub(rep.Start), 2*time.Second, "not asked before the holder wait ends")
		assert.Less(t, req.Start.Sub(rep.Start), 2*time.Second+2*td.cfg.poll, "asked when it ends")
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit done"}, d.Events(), "the daemon was asked to stop, and stopped its device")
	})
}

// slowProcfs fills f's procfs with n processes, each holding nothing, and
// returns the hook that makes the holders scan read each in per, in
// virtual time: a loaded node's scan, which took up to 1.5 s on a loaded
// 2-core VM (about 16 ms quiet).
func slowProcfs(t *testing.T, f *fixture, n int, per time.Duration) func(string) {
	t.Helper()
	for pid := 1; pid <= n; pid++ {
		require.NoError(t, os.MkdirAll(filepath.Join(f.proc, strconv.Itoa(pid), "fd"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, strconv.Itoa(pid), "comm"), []byte("idle\n"), 0o644))
	}
	return func(string) { time.Sleep(per) }
}

// sandboxd's reserve at a short grace (500 ms, its floor) and a window of
// 600 ms, on a vulnerable kernel, no control device; the holders scan
// takes 1.5 s (250 processes, 6 ms each: a loaded node). 0 .. 175 ms:
// the scan reads what it can until halfway through the last resort's part
// of the reserve (and the one process it is reading then, 180 ms); the
// processes it did not read are not known, a possible holder: the holder
// wait is over, and the last resort, with no process to kill, scans again
// until the end of its part (252 ms), and sets the processes it did not
// read aside like any possible holder .. 252 ms: the daemon is asked to stop
// with its own part of the reserve and more ahead, stops both devices and
// exits. Before, the scan ran to its end (1.5 s),
// past the step's deadline: the daemon was asked too late, the devices
// were left live (left_live, UnsafeError) and the daemon running, to die
// at SIGKILL with them.
func TestStepStopsScanningInTimeForTheDaemonsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		cfg := f.config(vulnerable, nil, Config{NoControl: true, Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
		d := newMemDaemon(f.tree, 0, 1)
		d.step = 20 * time.Millisecond
		defer d.close()
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, took, err := runFor(t, td, 600*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.LessOrEqual(t, took, 600*time.Millisecond, "returns by its deadline")
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.Equal(t, 252*time.Millisecond, req.Start.Sub(rep.Start), "asked when the daemon's stop's part of the reserve begins, and one process's read")
		h, aside := rep.Step("holders"), rep.Step("possible holders")
		require.NotNil(t, h)
		require.NotNil(t, aside)
		assert.Contains(t, h.Err, "221 of 250 processes not read: the holders scan stops in time for the last resort's kill and the daemon's stop")
		assert.Equal(t, 180*time.Millisecond, h.Start.Add(h.Duration).Sub(rep.Start), "halfway through the last resort's window, and one process's read")
		assert.Contains(t, aside.Err, "of 250 processes not read", "set aside")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.True(t, rep.Daemon.Exited)
	})
}

// 0 .. the scans are quick and find a file system of device 0 mounted by
// pid 99 .. 2.4 s: procfs gets slow (10 ms a process: the node's load
// rises), and the scan running when the holder wait ends is cut short at
// 2.65 s, before it reaches pid 99. What it did not read is not known, but
// pid 99's mount was: the last scan that read it stands, and the step
// returns a HeldError naming it, the daemon not asked to stop. Without
// that, the possible holder of the processes not read is set aside and the
// device stopped under the mount.
func TestScanCutShortKeepsWhatTheLastScanFoundOfAProcessItDidNotRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "99", "mountinfo"), []byte("36 22 4000:0 / /mnt/disk rw - ext4 /dev/ublkb0 rw\n"), 0o644))
		start := time.Now()
		cfg := f.config(vulnerable, nil, Config{NoControl: true, NoLastResort: true, Reserve: 500 * time.Millisecond, PollInterval: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = func(string) {
			if time.Since(start) >= 2400*time.Millisecond {
				time.Sleep(10 * time.Millisecond)
			}
		}
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 3*time.Second)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, map[int][]Holder{0: {{PID: 99, Comm: "idle", Kind: blockdev.Mount, Detail: "/mnt/disk"}}}, held.Holders)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.Contains(t, h.Err, "processes not read", "the last scan was cut short")
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the mount")
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
	})
}

// sandboxd's 500 ms reserve in a 3 s window, a vulnerable kernel, no
// control device. 0 .. pid 99, a VMM, holds ublkb1 open; the daemon
// serves ublkb0 and ublkb1 .. 0.4 s: procfs gets slow (30 ms a process: a
// loaded node), and the scan that begins at 0.5 s is cut at the kill
// floor (2.65 s) before it reaches pid 99 .. 1 s: the VM ends, pid 99
// closes the disk and the daemon deletes ublkb1 on its own .. 2.65 s: the
// holder wait ends. What the cut scan did not read of pid 99 is what the
// scan before found, a hold of ublkb1, which is gone: no disk to hold,
// it keeps nothing from stopping, and the daemon is asked to stop
// ublkb0. Before, the step returned a HeldError naming ublkb1, gone, with
// the daemon never asked: ublkb0 was left live for the pod's SIGKILL.
func TestHoldOfADeviceGoneDoesNotKeepTheDaemonFromBeingAsked(t *testing.T) {
	for name, lastResort := range map[string]bool{"last resort": true, "no last resort": false} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0, 1)
				slowProcfs(t, f, 100, 0)
				node := filepath.Join(t.TempDir(), "ublkb1")
				require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 1))))
				fd := filepath.Join(f.proc, "99", "fd", "3")
				require.NoError(t, os.Symlink(node, fd))
				start := time.Now()
				cfg := f.config(vulnerable, nil, Config{NoControl: true, NoLastResort: !lastResort, Reserve: 500 * time.Millisecond, PollInterval: 500 * time.Millisecond})
				cfg.hooks.BeforeProcess = func(string) {
					if time.Since(start) >= 400*time.Millisecond {
						time.Sleep(30 * time.Millisecond)
					}
				}
				d := newMemDaemon(f.tree, 0)
				d.step = 20 * time.Millisecond
				defer d.close()
				go func() {
					time.Sleep(time.Second)
					_ = os.Remove(fd)
					_ = f.tree.StopDevice(1)
					_ = f.tree.DeleteDevice(1)
				}()
				td, err := New(d, cfg)
				require.NoError(t, err)

				rep, _, err := runFor(t, td, 3*time.Second)
				t.Log(rep.String())
				require.NoError(t, err)
				h := rep.Step("holders")
				require.NotNil(t, h)
				assert.Contains(t, h.Err, "processes not read", "the last scan was cut short")
				assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit done"}, d.Events(), "the daemon asked, and stopped ublkb0")
				assert.False(t, f.tree.HasDisk(0))
				assert.Equal(t, VerdictStopped, rep.Device(1).Verdict, "gone by the daemon")
			})
		})
	}
}

// A minute's window, the default reserve, a vulnerable kernel, no control
// device. 0 .. pid 99, a VMM outside the server's cgroup, holds ublkb1
// open .. 50 s: the last resort spares it (never killed), and its cgroup
// read takes the last resort's whole part (to 53 s), during which the VM
// ends: pid 99 closes the disk and the daemon deletes ublkb1 .. 53 s: no
// time is left to scan again, and the holders are the last scan's, pid
// 99's hold of ublkb1 among them; ublkb1 is gone, so that hold keeps
// nothing from stopping, and the daemon is asked to stop ublkb0. Kept (as
// the last resort did before row 1192's change reached it), it was a
// HeldError naming the gone ublkb1, the daemon never asked, ublkb0 live.
func TestLastResortOutOfTimeDropsTheHoldOfADeviceGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb1")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 1))))
		fd := filepath.Join(f.proc, "99", "fd", "3")
		require.NoError(t, os.Symlink(node, fd))
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		td.cfg.killHolders = func(ctx context.Context, _ string, held map[int][]Holder, _ map[blockdev.DevNum]int, _ int) (string, []HolderFate) {
			_ = os.Remove(fd)
			_ = f.tree.StopDevice(1)
			_ = f.tree.DeleteDevice(1)
			<-ctx.Done() // a cgroup read as slow as a loaded node's
			var fates []HolderFate
			for id, hs := range held {
				for _, h := range hs {
					fates = append(fates, HolderFate{Holder: h, Device: id, Reason: "outside the server's cgroup: never killed"})
				}
			}
			return "0::/kubepods/pod1/ctr", fates
		}

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		last := rep.Step("last resort")
		require.NotNil(t, last, "the last resort ran")
		assert.Contains(t, last.Result, "not scanned again")
		assert.Contains(t, last.Result, "0 device(s) still held")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit done"}, d.Events(), "the daemon asked, and stopped ublkb0")
		assert.False(t, f.tree.HasDisk(0))
	})
}

// 0 .. pid 99 holds device 0 open (an fd on a block node 4000:0) .. 50 s,
// the last-resort point: it is doomed and killed, and stays listed in
// procfs (a zombie its parent has not reaped) .. procfs gets slow, and the
// last resort's scan is cut short at 53 s before it reaches pid 99. A
// killed process's holds went with it: the step does not keep them from
// the scan before, and asks the daemon to stop. Keeping them spared the
// disk (HeldError) and left the daemon to die at SIGKILL with it live.
func TestScanCutShortDoesNotKeepTheHoldsOfAKilledProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, d, _, td := lastResortRig(t, vulnerable, Config{NoControl: true, PollInterval: 5 * time.Second})
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		require.NoError(t, os.Symlink(node, filepath.Join(f.proc, "99", "fd", "3")))
		start := time.Now()
		td.cfg.beforeProcess = func(string) {
			if time.Since(start) >= 50*time.Second {
				time.Sleep(50 * time.Millisecond)
			}
		}
		td.cfg.killHolders = func(_ context.Context, _ string, held map[int][]Holder, _ map[blockdev.DevNum]int, _ int) (string, []HolderFate) {
			var fates []HolderFate
			for id, hs := range held {
				for _, h := range hs {
					fates = append(fates, HolderFate{Holder: h, Device: id, Doomed: h.PID == 99, Killed: h.PID == 99})
				}
			}
			return "0::/kubepods/pod1/ctr", fates
		}

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		require.NotNil(t, rep.LastResort)
		require.Len(t, rep.LastResort.Killed(), 1)
		assert.Equal(t, 99, rep.LastResort.Killed()[0].Holder.PID)
		last := rep.Step("last resort")
		require.NotNil(t, last)
		assert.Contains(t, last.Result, "0 device(s) still held")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// slowExit stands in for the last resort's killer over a fake procfs: pid
// 99 is in the server's cgroup, and SIGKILLed it takes exit to go (its fd
// link removed then: a large VM's memory takes time to free); the kill
// waits for that until ctx ends. Every other holder is spared.
func slowExit(f *fixture, exit time.Duration) func(context.Context, string, map[int][]Holder, map[blockdev.DevNum]int, int) (string, []HolderFate) {
	return func(ctx context.Context, _ string, held map[int][]Holder, _ map[blockdev.DevNum]int, _ int) (string, []HolderFate) {
		var fates []HolderFate
		var gone chan struct{}
		for id, hs := range held {
			for _, h := range hs {
				fate := HolderFate{Holder: h, Device: id, Reason: "none known to kill"}
				if h.PID == 99 {
					if gone == nil {
						gone = make(chan struct{})
						time.AfterFunc(exit, func() {
							_ = os.RemoveAll(filepath.Join(f.proc, "99", "fd"))
							close(gone)
						})
					}
					fate.Doomed, fate.Signalled = true, true
					select {
					case <-gone:
						fate.Killed, fate.Reason = true, "in the server's cgroup, so doomed by the pod's SIGKILL anyway"
					case <-ctx.Done():
						fate.Reason, fate.Err = "SIGKILL sent, exit not seen", ctx.Err().Error()
					}
				}
				fates = append(fates, fate)
			}
		}
		return "0::/kubepods/pod1/ctr", fates
	}
}

// slowExitRig is a cooperative daemon (10 ms a step) of f's devices 0 and
// 1 and its step with cfg, where pid 99 of f's procfs, a VMM in the
// server's cgroup, holds device 0 open, and SIGKILLed takes exit to go
// (slowExit).
func slowExitRig(t *testing.T, f *fixture, cfg Config, exit time.Duration) (*memDaemon, *Teardown) {
	t.Helper()
	node := filepath.Join(t.TempDir(), "ublkb0")
	require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, "99", "fd"), 0o755))
	require.NoError(t, os.Symlink(node, filepath.Join(f.proc, "99", "fd", "3")))
	d := newMemDaemon(f.tree, 0, 1)
	d.step = 10 * time.Millisecond
	t.Cleanup(d.close)
	td, err := New(d, cfg)
	require.NoError(t, err)
	td.cfg.killHolders = slowExit(f, exit)
	return d, td
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; pid 99, a VMM in the server's cgroup, holds device 0
// open and never closes it, and procfs reads 7 ms a process (100 of them:
// 700 ms a scan, a loaded node's). 59.2 s: a scan starts, and the
// last-resort point comes at 59.5 s, the last resort's 150 ms ending at
// 59.65 s. The scan stops halfway through them, at 59.578 s (the process
// it is reading then), the rest of the window the kill's; the VMM,
// SIGKILLed, takes 200 ms to exit, more than is left: at 59.65 s its exit
// is not seen, but it runs no more code, and the daemon is asked to stop
// then and stops both devices, the VMM's too. Before, the scan ran until
// 59.65 s, the end of the window; the kill's exit wait failed at once, the
// last resort's own scan read nothing and kept the VMM's fd from the one
// before, and the step returned a HeldError, the daemon never asked to
// stop: the pod's SIGKILL 350 ms later found both devices live.
func TestLastResortOutOfTimeStillAsksTheDaemonToStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		cfg := f.config(vulnerable, nil, Config{NoControl: true, Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 100, 7*time.Millisecond)
		d, td := slowExitRig(t, f, cfg, 200*time.Millisecond)

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		h, last, req := rep.Step("holders"), rep.Step("last resort"), rep.Step("request stop")
		require.NotNil(t, h)
		require.NotNil(t, last)
		require.NotNil(t, req)
		assert.Equal(t, 59578*time.Millisecond, h.Start.Add(h.Duration).Sub(rep.Start), "the scan stops halfway through the last resort's window")
		assert.Equal(t, 59650*time.Millisecond, req.Start.Sub(rep.Start), "asked at the end of the last resort's window")
		require.NotNil(t, rep.LastResort)
		dying := rep.LastResort.Dying()
		require.Len(t, dying, 1)
		assert.Equal(t, 99, dying[0].Holder.PID)
		assert.True(t, dying[0].Doomed && dying[0].Signalled && !dying[0].Killed, "%+v", dying[0])
		for _, s := range rep.LastResort.Spared() {
			assert.Zero(t, s.Holder.PID, "the VMM is SIGKILLed, not spared: %+v", s)
		}
		assert.Contains(t, last.Result, "1 SIGKILLed with its exit not seen")
		assert.Contains(t, rep.String(), "SIGKILLed, exit not seen pid 99")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
		assert.True(t, rep.Daemon.Exited)
	})
}

// 0 .. pid 99, a VMM in the server's cgroup, holds device 0 open and never
// closes it; procfs reads at once .. 59.5 s, the last-resort point of a
// 60 s window with sandboxd's 500 ms reserve: the VMM is SIGKILLed and
// takes 200 ms to exit, more than the last resort's 150 ms .. 59.65 s: the
// window is over, and the last resort does not scan procfs again (a scan
// with no time left lists procfs and sysfs and reads no process, right
// before the daemon's stop): the holders are the last scan's, less the
// VMM, and the daemon is asked to stop. Before, it scanned all the same,
// and its Report said that no process was read because procfs took longer
// to read than the time left (a possible holder of every disk, set aside
// with a WARN), where none had been tried.
func TestLastResortDoesNotScanAgainOnceItsWindowIsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		slowProcfs(t, f, 10, 0)
		d, td := slowExitRig(t, f, f.config(vulnerable, nil, Config{NoControl: true, Reserve: 500 * time.Millisecond, PollInterval: 5 * time.Second}), 200*time.Millisecond)

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		last, req := rep.Step("last resort"), rep.Step("request stop")
		require.NotNil(t, last)
		require.NotNil(t, req)
		assert.Equal(t, 59500*time.Millisecond, last.Start.Sub(rep.Start))
		assert.Contains(t, last.Result, "not scanned again: its part of the reserve was over")
		assert.Nil(t, rep.Step("possible holders"), "no process said not read for want of time: none was tried")
		assert.Equal(t, 59650*time.Millisecond, req.Start.Sub(rep.Start))
		require.Len(t, rep.LastResort.Dying(), 1)
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// fakeVMM is a process pinned by the last resort in a fake procfs, in
// virtual time: SIGKILLed, it takes exit to go (its fd links removed
// then), and Wait sees that.
// When reused, the kernel gives its PID at once to a new process, started
// later, that opens the disk too.
type fakeVMM struct {
	t      *testing.T
	dir    string
	node   string
	exit   time.Duration
	reused bool
	// reaped: it exits by itself, and is reaped, as its SIGKILL is sent:
	// the pidfd says so (ESRCH).
	reaped bool
	sent   []time.Time // when each SIGKILL came
	gone   chan struct{}
}

func (v *fakeVMM) Signal(syscall.Signal) error {
	if v.reaped {
		_ = os.RemoveAll(v.dir)
		close(v.gone)
		return fmt.Errorf("signal killed to pid %s: %w", filepath.Base(v.dir), os.ErrProcessDone)
	}
	v.sent = append(v.sent, time.Now())
	if len(v.sent) == 1 {
		time.AfterFunc(v.exit, func() {
			_ = os.RemoveAll(filepath.Join(v.dir, "fd"))
			if v.reused {
				v.start("qemu-new", 2000)
			}
			close(v.gone)
		})
	}
	return nil
}

// start writes the process at v's PID: comm, its /proc/PID/stat started
// at the given clock tick, and an fd on the disk.
func (v *fakeVMM) start(comm string, tick int) {
	pid := filepath.Base(v.dir)
	stat := fmt.Sprintf("%s (%s) S 1 %s%d 0 0\n", pid, comm, strings.Repeat("0 ", 17), tick)
	require.NoError(v.t, os.MkdirAll(filepath.Join(v.dir, "fd"), 0o755))
	require.NoError(v.t, os.WriteFile(filepath.Join(v.dir, "stat"), []byte(stat), 0o644))
	require.NoError(v.t, os.WriteFile(filepath.Join(v.dir, "comm"), []byte(comm+"\n"), 0o644))
	require.NoError(v.t, os.Symlink(v.node, filepath.Join(v.dir, "fd", "3")))
}

func (v *fakeVMM) Wait(ctx context.Context) error {
	select {
	case <-v.gone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (v *fakeVMM) Close() error { return nil }

// doomedVMMs is sandboxd's 500 ms reserve on a vulnerable kernel with no
// control device, and a cooperative daemon (10 ms a step) of devices 0
// and 1; the fake procfs is this process's, in the cgroup
// 0::/kubepods/pod1/ctr, with one fake VMM per PID of exit in a cgroup
// below it, each holding device 0 (block node 4000:0) open; the step's
// last resort kills them as the real one does, pinned as fakeVMMs.
func doomedVMMs(t *testing.T, exit map[int]time.Duration) (*memDaemon, *Teardown, map[int]*fakeVMM) {
	t.Helper()
	f := newFixture(t, 0, 1)
	d := newMemDaemon(f.tree, 0, 1)
	d.step = 10 * time.Millisecond
	t.Cleanup(d.close)
	td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true, Reserve: 500 * time.Millisecond, PollInterval: 5 * time.Second}))
	require.NoError(t, err)
	self := strconv.Itoa(os.Getpid())
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, self, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.proc, self, "cgroup"), []byte("0::/kubepods/pod1/ctr\n"), 0o644))
	require.NoError(t, os.Symlink(self, filepath.Join(f.proc, "self")))
	node := filepath.Join(t.TempDir(), "ublkb0")
	require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
	vmms := map[int]*fakeVMM{}
	for pid, exit := range exit {
		v := &fakeVMM{t: t, dir: filepath.Join(f.proc, strconv.Itoa(pid)), node: node, exit: exit, gone: make(chan struct{})}
		v.start("qemu", 1000)
		require.NoError(t, os.WriteFile(filepath.Join(v.dir, "cgroup"), []byte("0::/kubepods/pod1/ctr/vmm\n"), 0o644))
		vmms[pid] = v
	}
	td.cfg.killHolders = func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
		return killPinned(ctx, procRoot, held, devs, daemon, func(pid int) (pinned, error) {
			if v, ok := vmms[pid]; ok {
				return v, nil
			}
			return nil, os.ErrProcessDone
		})
	}
	return d, td, vmms
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; three VMMs of the pod hold device 0 open and never close
// it, and each takes 100 ms to exit once SIGKILLed (a VM's memory to
// free). 59.5 s, the last-resort point: all three get their SIGKILL ..
// 59.6 s: all three are seen exiting, the last resort's 150 ms not over;
// the daemon is asked to stop and stops both devices. Before, each kill
// waited for its exit before the next SIGKILL: the second VMM got it at
// 59.6 s and was not seen exiting by 59.65 s, the third got it at 59.65 s
// with no wait at all, and the daemon was asked only then.
func TestLastResortSignalsEveryDoomedHolderBeforeWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{97: 100 * time.Millisecond, 98: 100 * time.Millisecond, 99: 100 * time.Millisecond})

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		for pid, v := range vmms {
			require.Len(t, v.sent, 1, "pid %d", pid)
			assert.Equal(t, 59500*time.Millisecond, v.sent[0].Sub(rep.Start), "pid %d SIGKILLed at the last-resort point", pid)
		}
		require.NotNil(t, rep.LastResort)
		assert.Len(t, rep.LastResort.Killed(), 3, "all three seen exiting: %+v", rep.LastResort.Holders)
		assert.Empty(t, rep.LastResort.Dying())
		assert.Empty(t, rep.LastResort.Spared())
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.Equal(t, 59600*time.Millisecond, req.Start.Sub(rep.Start), "asked once the three exits were seen, one exit wait")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; a VMM of the pod, pid 98, holds device 0 open. 59.5 s,
// the last-resort point: it is SIGKILLed, exits 10 ms later and is seen
// exiting; its PID goes at once to a new process of the pod that opens
// the disk (a PID is reused once its process is reaped) .. 59.51 s: the
// last resort's scan lists pid 98 holding device 0, a process that
// started later than the one it killed: its holds are its own, and the
// daemon is not asked to stop under it (HeldError). Before, every hold of
// a PID the last resort signalled was dropped, and the daemon was asked
// to stop with the new process holding the disk.
func TestLastResortKeepsTheHoldsOfAProcessThatReusedASignalledPID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{98: 10 * time.Millisecond})
		vmms[98].reused = true

		rep, _, err := runFor(t, td, 60*time.Second)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		require.Len(t, held.Holders[0], 1)
		assert.Equal(t, 98, held.Holders[0][0].PID)
		assert.Equal(t, "qemu-new", held.Holders[0][0].Comm)
		require.Len(t, rep.LastResort.Killed(), 1, "the first process at pid 98 was killed")
		assert.Equal(t, "qemu", rep.LastResort.Killed()[0].Holder.Comm)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the new process")
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; three VMMs of the pod hold device 0 open. 59.5 s, the
// last-resort point: the holder wait's last scan lists pids 96 and 97
// holding it, then, as it reads on, pid 96 exits (reaped, gone from
// procfs) and pid 97 closes the disk, each as its server shuts it down;
// the check before each SIGKILL finds pid 96 gone and pid 97 holding
// nothing, and spares them; pid 98 is SIGKILLed and takes 200 ms to exit,
// more than the last resort's 150 ms, so the last resort does not scan
// again: the holders are the last scan's, less what its checks found gone
// .. 59.65 s: the daemon is asked to stop and stops both devices. Before,
// only the holds of the process it SIGKILLed were taken from the last
// scan's: pids 96 and 97 were still held to hold the disk, and the step
// returned a HeldError naming a process that no longer existed and one
// that had closed the disk, the daemon never asked to stop (the pod's
// SIGKILL 350 ms later found both devices live: the host-crash path).
func TestLastResortDropsTheHoldsItsChecksFoundGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{96: time.Hour, 97: time.Hour, 98: 200 * time.Millisecond})
		start := time.Now()
		td.cfg.beforeProcess = func(dir string) {
			if dir == vmms[98].dir && time.Since(start) >= 59500*time.Millisecond { // 96 and 97 read
				_ = os.RemoveAll(vmms[96].dir)
				_ = os.Remove(filepath.Join(vmms[97].dir, "fd", "3"))
			}
		}

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		for _, pid := range []int{96, 97} {
			assert.Empty(t, vmms[pid].sent, "pid %d not SIGKILLed: it holds no disk any more", pid)
		}
		require.NotNil(t, rep.LastResort)
		require.Len(t, rep.LastResort.Dying(), 1)
		assert.Equal(t, 98, rep.LastResort.Dying()[0].Holder.PID)
		last, req := rep.Step("last resort"), rep.Step("request stop")
		require.NotNil(t, last)
		require.NotNil(t, req)
		assert.Contains(t, last.Result, "0 device(s) still held")
		assert.Equal(t, 59650*time.Millisecond, req.Start.Sub(rep.Start), "asked at the end of the last resort's window")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; twenty VMMs of the pod hold device 0 open and never
// close it, each takes 50 ms to exit once SIGKILLed, and the check before
// each one's SIGKILL (its cgroup, its pidfd, its start time, its fds) takes
// 10 ms: procfs on a loaded node. 59.5 s, the last-resort point: the
// checks run side by side, eight at a time, and every VMM has its SIGKILL
// by 59.53 s .. 59.58 s: all twenty seen exiting, well inside the last
// resort's 150 ms; the daemon is asked to stop and stops both devices.
// Before, the checks ran one after another: the twentieth SIGKILL came at
// 59.7 s, five VMMs got theirs after the window's end with no exit wait,
// and the daemon was asked at 59.7 s, 50 ms into its own part of the
// reserve.
func TestLastResortChecksTheDoomedHoldersSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exits := map[int]time.Duration{}
		for pid := 200; pid < 220; pid++ {
			exits[pid] = 50 * time.Millisecond
		}
		d, td, vmms := doomedVMMs(t, exits)
		td.cfg.killHolders = func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
			return killPinned(ctx, procRoot, held, devs, daemon, func(pid int) (pinned, error) {
				time.Sleep(10 * time.Millisecond) // the check's procfs reads on a loaded node
				if v, ok := vmms[pid]; ok {
					return v, nil
				}
				return nil, os.ErrProcessDone
			})
		}

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		for pid, v := range vmms {
			require.Len(t, v.sent, 1, "pid %d", pid)
			assert.LessOrEqual(t, v.sent[0].Sub(rep.Start), 59530*time.Millisecond, "pid %d SIGKILLed by the third round of checks", pid)
		}
		require.NotNil(t, rep.LastResort)
		assert.Len(t, rep.LastResort.Killed(), 20, "all twenty seen exiting")
		assert.Empty(t, rep.LastResort.Dying())
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.Equal(t, 59580*time.Millisecond, req.Start.Sub(rep.Start), "asked once the last exit was seen")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// 0 .. pid 99, a VMM, holds device 0 open and never closes it; a scan
// every 5 s .. 9 s: procfs cannot be read any more (here it is gone from
// where the step reads it; on a node, a process out of file descriptors
// cannot open it) .. 10 s: the scan reads no process, and what the processes hold is not
// known. The last scan's holds stand, and the processes not read are a
// possible holder of every disk, which the Report names .. 12 s: procfs
// reads again, and the next scans find pid 99 as before .. 60 s: with the
// last resort off, the step returns a HeldError naming it, the daemon
// never asked to stop under it. Before, the failed scan was taken for one
// that found no holder: at 10 s the daemon was asked to stop, and stopped
// the disk under the VMM.
func TestScanThatCannotReadProcfsKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		require.NoError(t, os.Symlink(node, filepath.Join(f.proc, "99", "fd", "3")))
		time.AfterFunc(9*time.Second, func() { require.NoError(t, os.Rename(f.proc, f.proc+".away")) }) // not as a scan runs
		time.AfterFunc(12*time.Second, func() { require.NoError(t, os.Rename(f.proc+".away", f.proc)) })
		rep, held, d := heldToTheEnd(t, f)
		require.Len(t, held.Holders[0], 1)
		assert.Equal(t, 99, held.Holders[0][0].PID)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the VMM")
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
		var unread []string
		for _, h := range rep.Device(0).Holders {
			if h.Kind == blockdev.Possible && h.PID == 0 {
				unread = append(unread, h.Detail)
			}
		}
		require.Len(t, unread, 1, "the Report names what the failed scan did not know: %+v", rep.Device(0).Holders)
		assert.Contains(t, unread[0], "procfs not read")
	})
}

// The timeline of TestLastResortKeepsTheHoldsOfAProcessThatReusedASignalledPID,
// read in the Report: the VMM SIGKILLed at pid 98 is named with its start
// time (/proc/PID/stat's field 22, clock tick 1000), in the JSON too, and
// the last resort's step says why a hold at pid 98 was kept after the
// kill: the process there started at tick 2000, another one. Before, the
// start time was only the step's own, and the Report named pid 98 killed
// and pid 98 holding the disk, with nothing to tell the two apart.
func TestReportTellsTheKilledProcessFromOneThatReusedItsPID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, td, vmms := doomedVMMs(t, map[int]time.Duration{98: 10 * time.Millisecond})
		vmms[98].reused = true

		rep, _, err := runFor(t, td, 60*time.Second)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		killed := rep.LastResort.Killed()
		require.Len(t, killed, 1)
		assert.Equal(t, uint64(1000), killed[0].StartTime)
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"start_time":1000`)
		last := rep.Step("last resort")
		require.NotNil(t, last)
		assert.Contains(t, last.Result, "pid 98 is another process since its SIGKILL (started at clock tick 2000, the one SIGKILLed at tick 1000): its holds are its own")
		assert.Contains(t, rep.String(), "killed pid 98 (qemu) fd fd 3 -> ")
		assert.Contains(t, rep.String(), "started at clock tick 1000")
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; a VMM of the pod, pid 98, holds device 0 open .. 59.5 s,
// the last-resort point: it is checked, doomed and still holding the
// disk, and exits by itself (its server shut it down) and is reaped just
// before its SIGKILL, which its pidfd says never reached it (ESRCH). The
// Report says it exited by itself, neither killed nor SIGKILLed; its
// holds are gone, and the daemon is asked to stop. Before, it was
// reported killed ("killed so the devices can be stopped before it"),
// its exit "seen".
func TestLastResortReportsAHolderThatExitedBeforeItsSIGKILLAsExited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{98: time.Hour})
		vmms[98].reaped = true

		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		require.NotNil(t, rep.LastResort)
		assert.Empty(t, rep.LastResort.Killed(), "%+v", rep.LastResort.Holders)
		assert.Empty(t, rep.LastResort.Dying())
		require.Len(t, rep.LastResort.Holders, 1)
		f := rep.LastResort.Holders[0]
		assert.Equal(t, 98, f.Holder.PID)
		assert.False(t, f.Signalled || f.Killed, "%+v", f)
		assert.Equal(t, "exited by itself before the kill", f.Reason)
		assert.Contains(t, rep.String(), "spared pid 98 (qemu)")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "stop 1", "delete 1", "exit done"}, d.Events())
		assert.Equal(t, VerdictStopped, rep.Verdict)
	})
}

// sandboxd's 500 ms reserve in a 60 s window, a vulnerable kernel, no
// control device; a VMM of the pod, pid 98, holds device 0 open, and a
// file system on device 0 is mounted in its mount namespace, which the
// scans name by pid 98 (the first process they read in it; the server's
// own, say, which the VMM shares). 59.5 s, the last-resort point: the VMM
// is SIGKILLed and takes 200 ms to exit, more than the last resort's
// 150 ms, so the last resort does not scan again: the holders are the
// last scan's less the VMM's own holds. The mount is kernel state, which
// the VMM's death does not release: device 0 stays live, the daemon is
// not asked to stop, and the step returns a HeldError naming the mount.
// Before, every hold the last scan listed at pid 98 was dropped, the
// mount with them, and the daemon was asked to stop with the file system
// mounted on the disk.
func TestLastResortKeepsAMountListedAtAPIDItSIGKILLed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, td, vmms := doomedVMMs(t, map[int]time.Duration{98: 200 * time.Millisecond})
		require.NoError(t, os.WriteFile(filepath.Join(vmms[98].dir, "mountinfo"), []byte("36 22 4000:0 / /mnt/disk rw - ext4 /dev/ublkb0 rw\n"), 0o644))

		rep, _, err := runFor(t, td, 60*time.Second)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Equal(t, map[int][]Holder{0: {{PID: 98, Comm: "qemu", StartTime: 1000, Kind: blockdev.Mount, Detail: "/mnt/disk"}}}, held.Holders)
		require.Len(t, rep.LastResort.Dying(), 1, "the VMM SIGKILLed, its exit not seen")
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the mount")
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
	})
}

// A vulnerable kernel, no last resort, a scan every 5 s; a VMM, pid 99,
// holds device 0 open (fd 3) .. 9 s: its fds can no longer be read (here
// its fd directory a file, ENOTDIR: EACCES, or EMFILE in the server, on a
// node), and stay so. Each scan from 10 s on lists it as a possible holder
// naming the error, and keeps its fd from the scan before: the VMM is not
// forgotten, the daemon is not asked to stop under it, and the step ends
// with a HeldError naming both. Before, the scan at 10 s found no holder
// (a process whose fds could not be read held nothing) and the daemon was
// asked to stop then, the disk stopped under the VMM.
func TestProcessWhoseFdsCannotBeReadKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		fd := filepath.Join(f.proc, "99", "fd")
		require.NoError(t, os.Symlink(node, filepath.Join(fd, "3")))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.RemoveAll(fd))
			require.NoError(t, os.WriteFile(fd, nil, 0o644))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the VMM")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{PID: 99, Comm: "idle", Kind: blockdev.FD, Detail: "fd 3 -> " + node}, held.Holders[0][0])
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^pid 99 \(idle\) possible fds not read \(open .*/99/fd: not a directory\)`, possible[0])
	})
}

// A vulnerable kernel, no last resort, a scan every 5 s; a VMM, pid 99
// (qemu, started at clock tick 1000), holds device 0 open .. 9 s: it has
// exited and been reaped, and a new qemu got pid 99 (started at tick 2000)
// and opened the disk. The device's holders in the Report name both, each
// with its start time, in the JSON too. Before, the scan's holders had no
// start time, the two were one entry, and the Report could not say the
// disk had been held by two processes in turn.
func TestDeviceHoldersTellTwoProcessesOfOnePIDApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		vmm := filepath.Join(f.proc, "99")
		started := func(tick int) {
			stat := fmt.Sprintf("99 (qemu) S 1 %s%d 0 0\n", strings.Repeat("0 ", 17), tick)
			require.NoError(t, os.WriteFile(filepath.Join(vmm, "stat"), []byte(stat), 0o644))
		}
		require.NoError(t, os.WriteFile(filepath.Join(vmm, "comm"), []byte("qemu\n"), 0o644))
		started(1000)
		require.NoError(t, os.Symlink(node, filepath.Join(vmm, "fd", "3")))
		time.AfterFunc(9*time.Second, func() { started(2000) }) // not as a scan runs
		rep, held, _ := heldToTheEnd(t, f)
		fd := "fd 3 -> " + node
		assert.Equal(t, []Holder{
			{PID: 99, Comm: "qemu", StartTime: 1000, Kind: blockdev.FD, Detail: fd},
			{PID: 99, Comm: "qemu", StartTime: 2000, Kind: blockdev.FD, Detail: fd},
		}, rep.Device(0).Holders)
		assert.Equal(t, []Holder{{PID: 99, Comm: "qemu", StartTime: 2000, Kind: blockdev.FD, Detail: fd}}, held.Holders[0])
		b, err := json.Marshal(rep.Device(0).Holders)
		require.NoError(t, err)
		assert.Contains(t, string(b), `"start_time":1000`)
		assert.Contains(t, string(b), `"start_time":2000`)
	})
}

// A vulnerable kernel, no last resort, a scan every 5 s; a VMM, pid 42,
// holds device 0 through its io_uring's registered files (fd 9, the disk's
// own fd closed) .. 9 s: its ring gets busy, and from then on the kernel
// does not list the ring's files (its lock held at every read). The ring
// still holds the disk, as far as anyone knows: the step keeps the hold
// the scan before found, and never asks the daemon to stop under it.
// Before, a ring not listed was only a possible holder, the hold was
// dropped at the next scan, set aside at the end of the holder wait, and
// the daemon asked to stop under the VMM's ring.
func TestProcessWhoseRingIsNotListedKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		info := busyRing(t, f)
		require.NoError(t, os.WriteFile(info, []byte("UserFiles:\t1\n    0: "+node+"\nUserBufs:\t0\n"), 0o644))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.WriteFile(info, []byte("SqThread:\t-1\nUserFiles:\t1\nUserBufs:\t0\nPollList:\n"), 0o644))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the VMM's ring")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{PID: 42, Comm: "spdk", Kind: blockdev.Ring, Detail: "io_uring fd 9 slot 0 -> " + node}, held.Holders[0][0])
		assert.Equal(t, VerdictHeld, rep.Device(0).Verdict)
	})
}

// A vulnerable kernel, no last resort, a scan every 5 s; pid 99's mount
// namespace has a file system on device 0 mounted at /mnt/disk .. 9 s: its
// mountinfo can no longer be read (here a directory, EISDIR: EMFILE or
// ENOMEM in the server, on a node), the only process of that namespace. The
// scans from 10 s on list it as a possible holder whose namespace's mounts
// are not known, and keep the mount the scan before found: the daemon is
// not asked to stop under it. Before, a namespace whose mountinfo no
// process let the scan read said nothing: the mount was dropped, the scan
// found no holder, and the daemon was asked to stop under the mounted disk.
func TestNamespaceWhoseMountsCannotBeReadKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		mountinfo := filepath.Join(f.proc, "99", "mountinfo")
		require.NoError(t, os.WriteFile(mountinfo, []byte("36 22 4000:0 / /mnt/disk rw - ext4 /dev/ublkb0 rw\n"), 0o644))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.Remove(mountinfo))
			require.NoError(t, os.Mkdir(mountinfo, 0o755))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the mount")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{PID: 99, Comm: "idle", Kind: blockdev.Mount, Detail: "/mnt/disk"}, held.Holders[0][0])
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^pid 99 \(idle\) possible mounts not read \(.*is a directory\)`, possible[0])
	})
}

// heldToTheEnd runs the step on f's device 0 as the tests of what a scan
// keeps from the one before do: a vulnerable kernel, no control device, no
// last resort, a scan every 5 s, a cooperative daemon, 60 s. The step must
// end with a HeldError; it returns the Report, that error and the daemon.
func heldToTheEnd(t *testing.T, f *fixture) (*Report, *HeldError, *memDaemon) {
	t.Helper()
	d := newMemDaemon(f.tree, 0)
	d.step = 10 * time.Millisecond
	t.Cleanup(d.close)
	td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true, NoLastResort: true, PollInterval: 5 * time.Second}))
	require.NoError(t, err)
	rep, _, err := runFor(t, td, 60*time.Second)
	var held *HeldError
	require.ErrorAs(t, err, &held)
	return rep, held, d
}

// possibleHolders lists the possible holders the Report names for device
// id, as their String.
func possibleHolders(rep *Report, id int) []string {
	var possible []string
	for _, h := range rep.Device(id).Holders {
		if h.Kind == blockdev.Possible {
			possible = append(possible, h.String())
		}
	}
	return possible
}

// A vulnerable kernel, no last resort, a scan every 5 s; pid 99's mount
// namespace has a file system on device 0 mounted at /mnt/disk .. 9 s:
// the disk's device number can no longer be read from sysfs
// (/sys/block/ublkb0/dev, here a directory, EISDIR: EMFILE or ENOMEM in
// the server), the disk still there. The scans from 10 s on do not know
// which number to look for: they list a possible holder saying so and keep
// the mount the scan before found, and the daemon is not asked to stop
// under it. Before, a disk whose number was not read was not scanned at
// all: the scan found no holder, and the daemon was asked to stop under
// the mounted disk.
func TestDiskWhoseNumberCannotBeReadKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "99", "mountinfo"), []byte("36 22 4000:0 / /mnt/disk rw - ext4 /dev/ublkb0 rw\n"), 0o644))
		dev := filepath.Join(f.tree.Root, "block", "ublkb0", "dev")
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.Remove(dev))
			require.NoError(t, os.Mkdir(dev, 0o755))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the mount")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{PID: 99, Comm: "idle", Kind: blockdev.Mount, Detail: "/mnt/disk"}, held.Holders[0][0])
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible ublkb0's device number not read \(.*is a directory\)`, possible[0])
	})
}

// The same with a partition: a file system on ublkb0p1 is mounted at
// /mnt/part .. 9 s: the partition's device number can no longer be read
// (/sys/block/ublkb0/ublkb0p1/dev, here a directory, EISDIR). The scans
// from 10 s on list a possible holder naming the partition and why, and
// keep the mount the scan before found: the daemon is not asked to stop
// under it. Before, blockdev.Partitions left the partition out without a
// word: the scans found no holder, and the daemon was asked to stop under
// the mounted partition.
func TestPartitionWhoseNumberCannotBeReadKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		part := filepath.Join(f.tree.Root, "block", "ublkb0", "ublkb0p1")
		require.NoError(t, os.MkdirAll(part, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(part, "dev"), []byte("4001:1\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "99", "mountinfo"), []byte("36 22 4001:1 / /mnt/part rw - ext4 /dev/ublkb0p1 rw\n"), 0o644))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.Remove(filepath.Join(part, "dev")))
			require.NoError(t, os.Mkdir(filepath.Join(part, "dev"), 0o755))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the mount")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{PID: 99, Comm: "idle", Kind: blockdev.Mount, Detail: "/mnt/part"}, held.Holders[0][0])
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible ublkb0's partitions not all read \(ublk: partition ublkb0p1 of ublkb0: device number not read: .*is a directory\)`, possible[0])
	})
}

// The same with a device stacked on the disk: device-mapper's dm-0 holds
// ublkb0 (sysfs holders/) .. 9 s: the disk's holders/ can no longer be
// listed (here a file, ENOTDIR: EMFILE or ENOMEM in the server). The
// scans from 10 s on keep dm-0, which the scan before found, and list a
// possible holder naming what was not read: the daemon is not asked to
// stop under dm-0. Before, blockdev.StackHolders dropped the error: the
// scans found no holder, and the daemon was asked to stop under the
// stacked device.
func TestStackedHoldersThatCannotBeListedKeepWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		dm := f.hold(t, 0, "dm-0")
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			dir := filepath.Dir(dm)
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, os.WriteFile(dir, nil, 0o644))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under dm-0")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{Kind: blockdev.Stacked, Detail: "dm-0"}, held.Holders[0][0])
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible ublkb0's stacked devices not all listed \(ublk: devices stacked on ublkb0 not listed: .*not a directory\)`, possible[0])
	})
}

// A disk's holders/ cannot be listed from 3 s on (here a file, ENOTDIR),
// and the file system mounted on it, which the first scans found, is
// unmounted at 6 s. What holders/ would list is not known, but a mount is
// found by the disk's number, which the scans still read: from 6 s on
// they find no mount, and list only the possible holder naming what was
// not listed, which the end of the holder wait (10 s) sets aside: the
// daemon is asked to stop. Before, a holders/ not listed kept every hold
// the last scan had found, the mount gone too: the step ended with a
// HeldError, the daemon never asked, to die at SIGKILL with its device
// live.
func TestStackedHoldersNotListedKeepOnlyTheStackedDevicesFoundBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		mountinfo := filepath.Join(f.proc, "99", "mountinfo")
		require.NoError(t, os.WriteFile(mountinfo, []byte("36 22 4000:0 / /mnt/disk rw - ext4 /dev/ublkb0 rw\n"), 0o644))
		holders := filepath.Join(f.tree.Root, "block", "ublkb0", "holders")
		time.AfterFunc(3*time.Second+time.Millisecond, func() { // not as a scan runs
			require.NoError(t, os.RemoveAll(holders))
			require.NoError(t, os.WriteFile(holders, nil, 0o644))
		})
		time.AfterFunc(6*time.Second+time.Millisecond, func() { require.NoError(t, os.WriteFile(mountinfo, nil, 0o644)) })
		d := newMemDaemon(f.tree, 0)
		d.step = 10 * time.Millisecond
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true, NoLastResort: true, PollInterval: time.Second, HolderWait: 10 * time.Second}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 60*time.Second)
		require.NoError(t, err)
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.GreaterOrEqual(t, req.Start.Sub(rep.Start), 10*time.Second, "not asked before the holder wait ends")
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible ublkb0's stacked devices not all listed \(ublk: devices stacked on ublkb0 not listed: .*not a directory\)`, possible[0])
		assert.Contains(t, rep.Device(0).Holders, Holder{PID: 99, Comm: "idle", Kind: blockdev.Mount, Detail: "/mnt/disk"}, "found before the unmount")
	})
}

// A loop device backed by the disk (loop3, its backing file /dev/ublkb0,
// matched by the disk's kernel name) holds it .. 9 s: loop3's backing
// file can no longer be read (here a directory, EISDIR: EMFILE or ENOMEM
// in the server). The scans from 10 s on keep loop3, which the scan
// before found, and list a possible holder naming what was not read: the
// daemon is not asked to stop under the loop device. Before,
// blockdev.LoopHolders took every failed read for a device that is no
// loop: the scans found no holder, and the daemon was asked to stop under
// loop3, failing its I/O.
func TestLoopDeviceWhoseBackingFileCannotBeReadKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		require.NoError(t, os.MkdirAll(filepath.Join(f.tree.Root, "dev", "block"), 0o755))
		require.NoError(t, os.Symlink("../../block/ublkb0", filepath.Join(f.tree.Root, "dev", "block", "4000:0")))
		backing := filepath.Join(f.tree.Root, "block", "loop3", "loop", "backing_file")
		require.NoError(t, os.MkdirAll(filepath.Dir(backing), 0o755))
		require.NoError(t, os.WriteFile(backing, []byte("/dev/ublkb0\n"), 0o644))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.Remove(backing))
			require.NoError(t, os.Mkdir(backing, 0o755))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under loop3")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, blockdev.Loop, held.Holders[0][0].Kind)
		assert.Regexp(t, `^loop3 \(backing file /dev/ublkb0; matched by name`, held.Holders[0][0].Detail)
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible loop devices not all read \(ublk: loop device loop3's backing file not read: .*is a directory\)`, possible[0])
	})
}

// An ext4 file system alive on the disk, which sysfs shows
// (fs/ext4/ublkb0) and no mountinfo (unmounted lazily, a file on it still
// open) .. 9 s: sysfs's fs/ext4 can no longer be read (here a file,
// ENOTDIR). The scans from 10 s on keep the file system, which the scan
// before found, and list a possible holder naming what was not read: the
// daemon is not asked to stop under it. Before,
// blockdev.FileSystemHolders took every failed look for no file system:
// the scans found no holder, and the daemon was asked to stop under the
// file system, failing its I/O.
func TestFileSystemThatCannotBeLookedForKeepsWhatTheLastScanFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		slowProcfs(t, f, 100, 0)
		ext4 := filepath.Join(f.tree.Root, "fs", "ext4")
		require.NoError(t, os.MkdirAll(filepath.Join(ext4, "ublkb0"), 0o755))
		time.AfterFunc(9*time.Second, func() { // not as a scan runs
			require.NoError(t, os.RemoveAll(ext4))
			require.NoError(t, os.WriteFile(ext4, nil, 0o644))
		})
		rep, held, d := heldToTheEnd(t, f)
		assert.Empty(t, d.Events(), "the daemon is not asked to stop under the file system")
		require.Len(t, held.Holders[0], 1, "%v", held.Holders[0])
		assert.Equal(t, Holder{Kind: blockdev.FileSystem, Detail: "ext4 on ublkb0 (sysfs fs/ext4/ublkb0)"}, held.Holders[0][0])
		possible := possibleHolders(rep, 0)
		require.Len(t, possible, 1, "the Report names what was not read: %+v", rep.Device(0).Holders)
		assert.Regexp(t, `^possible file systems not all looked for \(ublk: file system fs/ext4/ublkb0 not looked for: .*not a directory\)`, possible[0])
	})
}

// Swap on a block device whose node was removed after swapon (a
// container's /dev gone: "/dev/ublkb0\040(deleted)" in /proc/swaps) names
// no path that resolves, so it may be on the disk. A vulnerable kernel, a
// minute's window (the last-resort point at 50 s), a cooperative daemon:
// the daemon is not asked to stop until the holder wait ends; the last
// resort sets the swap aside, saying what it is, and the disk stops then.
// Before, the scan dropped the swap area: the daemon was asked to stop at
// once, 0 holders, and swap on the disk would have failed its I/O.
func TestSwapOnANodeThatDoesNotResolveHoldsTheDiskUntilTheLastResort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		fakeProcess(t, f.proc, "self", "0::/kubepods/podA/ctr\n", "")
		swaps := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/ublkb0\\040(deleted)            partition\t32764\t\t0\t\t-2\n"
		require.NoError(t, os.WriteFile(filepath.Join(f.proc, "swaps"), []byte(swaps), 0o644))
		d := newMemDaemon(f.tree, 0)
		defer d.close()
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true}))
		require.NoError(t, err)
		start := time.Now()
		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		req := rep.Step("request stop")
		require.NotNil(t, req)
		assert.Equal(t, 50*time.Second, req.Start.Sub(start), "asked once the holder wait ended")
		require.NotNil(t, rep.LastResort)
		require.Len(t, rep.LastResort.Holders, 1, "%+v", rep.LastResort.Holders)
		fate := rep.LastResort.Holders[0]
		assert.Contains(t, fate.Holder.Detail, "swap on a block device not known: /dev/ublkb0 (deleted) does not resolve")
		assert.Contains(t, fate.Reason, "swap on a block device whose node does not resolve, which may be the disk")
	})
}
