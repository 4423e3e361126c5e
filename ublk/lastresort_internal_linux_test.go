//go:build linux

package ublk

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
)

// A ublk server, pid 99 (a per-device server the daemon forked, whose PID
// the step does not know), in the server's cgroup, serves ublkb0: it has
// /dev/ublkc0 open (fd 4), and holds the disk open too (fd 3). 60 s
// window, sandboxd's 500 ms reserve, a vulnerable kernel:
//
//	0 s      the scans find pid 99 holding ublkb0 (fd 3)
//	9 s      what tells a server can no longer be read: its fd directory
//	         (EACCES, EMFILE in the server; here not a directory), or
//	         ublkc0's device number in sysfs (here a directory, EISDIR)
//	59.5 s   the last-resort point: pid 99 is doomed, in the server's cgroup
//	         like the daemon
//
// The last resort does not kill a holder it cannot tell is not a ublk
// server: killing a server with its device live is the host-crash path.
// Its fate says it was spared and why, with the error, and so does the
// log's WARN. Not known to be the server either, its hold stands as a
// spared holder's: the daemon dies with the pod and the device has no
// UBLK_F_USER_RECOVERY, so the device is stopped under it while the
// daemon serves it, and the daemon, asked to stop, exits with no live
// device. Before, a holder whose fds (or the char device's number) could
// not be read was taken for one with no /dev/ublkcN open, and SIGKILLed.
func TestLastResortDoesNotKillAHolderItCannotTellIsNotAUblkServer(t *testing.T) {
	for name, tc := range map[string]struct {
		blind func(t *testing.T, f *fixture)
		err   string
	}{
		"its fds not read": {func(t *testing.T, f *fixture) {
			fd := filepath.Join(f.proc, "99", "fd")
			require.NoError(t, os.RemoveAll(fd))
			require.NoError(t, os.WriteFile(fd, nil, 0o644))
		}, "not a directory"},
		"the char device's number not read": {func(t *testing.T, f *fixture) {
			dev := filepath.Join(f.tree.Root, "class", "ublk-char", "ublkc0", "dev")
			require.NoError(t, os.Remove(dev))
			require.NoError(t, os.Mkdir(dev, 0o755))
		}, "ublkc0's device number"},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, d, srv, _, td, logs := ublkServerHolder(t)
				time.AfterFunc(9*time.Second, func() { tc.blind(t, f) }) // not as a scan runs

				rep, _, err := runFor(t, td, 60*time.Second)
				t.Log(rep.String())
				assert.Empty(t, srv.sent, "pid 99 may be ublkb0's server: not SIGKILLed")
				require.NotNil(t, rep.LastResort, "the last resort ran")
				var fates []HolderFate
				for _, h := range rep.LastResort.Holders {
					if h.Holder.PID == 99 {
						fates = append(fates, h)
					}
				}
				require.NotEmpty(t, fates, "the Report names pid 99's fate: %+v", rep.LastResort.Holders)
				for _, h := range fates {
					assert.False(t, h.Signalled || h.Killed, "%+v", h)
					assert.Contains(t, h.Reason, "not known whether it is a ublk server")
					assert.Contains(t, h.Err, tc.err)
				}
				assert.Contains(t, rep.Step("last resort").Result, "not known whether a ublk server")
				assert.Contains(t, logs.String(), "not known whether it is a ublk server")
				var stopped *StoppedHeldError
				require.ErrorAs(t, err, &stopped, "what it holds stands: ublkb0 stopped under it")
				assert.Equal(t, []int{0}, slices.Collect(maps.Keys(stopped.Holders)))
				assert.Equal(t, []string{"STOP_DEV 0", "request", "stop 0", "delete 0", "exit done"}, d.Events(),
					"stopped while the daemon serves it, then the daemon asked to stop")
				assert.True(t, rep.Daemon.Exited && !rep.Daemon.Killed, "%+v", rep.Daemon)
			})
		})
	}
}

// ublkServerHolder is device 0 of a fake sysfs, its char device numbered
// 4091:m, a cooperative daemon of it (10 ms a step) in the server's
// cgroup, a control device whose STOP_DEV takes 10 ms, and pid 99 of a
// fake procfs in a cgroup below the server's (0::/kubepods/pod1/ctr), with
// ublkb0 (fd 3) and ublkc0 (fd 4) open; the step (a vulnerable kernel,
// sandboxd's 500 ms reserve, a scan every 5 s) kills as the real last
// resort does, each process pinned as pins has it (pid 99 as a fakeVMM;
// a test adds its own), and logs to the buffer returned.
func ublkServerHolder(t *testing.T) (f *fixture, d *memDaemon, srv *fakeVMM, pins map[int]pinned, td *Teardown, logs *bytes.Buffer) {
	t.Helper()
	minor := uint32(os.Getpid()*2+29) % (1 << 20)
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0, CharMajor: 4091, CharMinor: minor}))
	f = &fixture{tree: tree, proc: t.TempDir()}
	self := strconv.Itoa(os.Getpid())
	require.NoError(t, os.MkdirAll(filepath.Join(f.proc, self, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(f.proc, self, "cgroup"), []byte("0::/kubepods/pod1/ctr\n"), 0o644))
	require.NoError(t, os.Symlink(self, filepath.Join(f.proc, "self")))

	dir := t.TempDir()
	disk, char := filepath.Join(dir, "ublkb0"), filepath.Join(dir, "ublkc0")
	require.NoError(t, unix.Mknod(disk, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
	require.NoError(t, unix.Mknod(char, unix.S_IFCHR|0o600, int(unix.Mkdev(4091, minor))))
	srv = &fakeVMM{t: t, dir: filepath.Join(f.proc, "99"), node: disk, gone: make(chan struct{})}
	srv.start("ublksrv", 1000)
	require.NoError(t, os.Symlink(char, filepath.Join(srv.dir, "fd", "4")))
	require.NoError(t, os.WriteFile(filepath.Join(srv.dir, "cgroup"), []byte("0::/kubepods/pod1/ctr/srv\n"), 0o644))

	d = newMemDaemon(f.tree, 0)
	d.step = 10 * time.Millisecond
	t.Cleanup(d.close)
	logs = &bytes.Buffer{}
	ctl := &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}
	td, err = New(d, f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond, PollInterval: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}))
	require.NoError(t, err)
	doomedDaemon(td)
	pins = map[int]pinned{99: srv}
	td.cfg.killHolders = func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
		return killPinned(ctx, procRoot, held, devs, daemon, func(pid int) (pinned, error) {
			if p := pins[pid]; p != nil {
				return p, nil
			}
			return nil, os.ErrProcessDone
		})
	}
	return f, d, srv, pins, td, logs
}

// A ublk server, pid 99 (a per-device server the daemon forked, whose PID
// the step does not know), in the server's cgroup, serves ublkb0 through
// its mapping of /dev/ublkc0 (the I/O descriptors), its fd on the char
// device closed (the driver needs none for the mapping, nor for the
// commands of an io_uring with the device among its registered files),
// and holds the disk open (fd 3) to the end. 60 s window, sandboxd's
// 500 ms reserve, a vulnerable kernel:
//
//	59.5 s   the last-resort point: pid 99 is doomed, in the server's cgroup
//
// The last resort reads the holders' mappings too: pid 99 is a ublk
// server, spared, not SIGKILLed. Before, it read their fds alone, found
// no /dev/ublkcN open in pid 99, and SIGKILLed it with ublkb0 live, the
// host-crash path.
func TestLastResortDoesNotKillAUblkServerThatMapsItsCharDevice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, srv, _, td, _ := ublkServerHolder(t)
		char, err := os.Readlink(filepath.Join(srv.dir, "fd", "4"))
		require.NoError(t, err)
		require.NoError(t, os.Remove(filepath.Join(srv.dir, "fd", "4")))
		fakeMapping(t, f.proc, "99", char)

		rep, _, _ := runFor(t, td, 60*time.Second)
		t.Log(rep.String())
		assert.Empty(t, srv.sent, "pid 99 is ublkb0's server: not SIGKILLed")
		require.NotNil(t, rep.LastResort, "the last resort ran")
		fates := 0
		for _, h := range rep.LastResort.Holders {
			if h.Holder.PID == 99 {
				fates++
				assert.False(t, h.Signalled || h.Killed, "%+v", h)
				assert.Contains(t, h.Reason, "a ublk server: it has /dev/ublkc0 open")
			}
		}
		assert.NotZero(t, fates, "the Report names pid 99's fate: %+v", rep.LastResort.Holders)
	})
}

// A ublk server, pid 99 (a per-device server the daemon forked, whose PID
// the step does not know: /dev/ublkc0 is open in it), and a VMM of the
// pod, pid 98, both in the server's cgroup, hold ublkb0 open to the end;
// 60 s window, sandboxd's 500 ms reserve, a vulnerable kernel; procfs gets
// slow at the last-resort point:
//
//	59.5 s    the last-resort point; the holder wait's last scan reads
//	          each process 200 ms after it comes to it
//	59.65 s   the last resort's part of the reserve is over, the scan not
//	59.7 s    the scan ends and the last resort begins, its window over
//
// A prompt look, begun past the window, still reads the holders' fds
// (with the slack the last resort's reads have): pid 99 is found a ublk
// server and spared, pid 98 is not one and, doomed, gets its SIGKILL, as
// a doomed holder does past the window. Before, the look gave up before
// reading any process and found no server: pid 99 was SIGKILLed with its
// device live.
func TestLastResortOutOfTimeStillTellsAUblkServerFromAVMM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _, srv, pins, td, _ := ublkServerHolder(t)
		vmm := &fakeVMM{t: t, dir: filepath.Join(f.proc, "98"), node: srv.node, gone: make(chan struct{})}
		vmm.start("qemu", 1000)
		require.NoError(t, os.WriteFile(filepath.Join(vmm.dir, "cgroup"), []byte("0::/kubepods/pod1/ctr/vmm\n"), 0o644))
		pins[98] = vmm
		start := time.Now()
		td.cfg.beforeProcess = func(string) {
			if time.Since(start) >= 59500*time.Millisecond {
				time.Sleep(200 * time.Millisecond)
			}
		}

		rep, _, _ := runFor(t, td, 60*time.Second)
		t.Log(rep.String())
		last := rep.Step("last resort")
		require.NotNil(t, last)
		require.Equal(t, 59700*time.Millisecond, last.Start.Sub(start), "the last resort begins with its window over")
		assert.Empty(t, srv.sent, "pid 99 is a ublk server: not SIGKILLed")
		assert.Len(t, vmm.sent, 1, "pid 98, a doomed VMM, gets its SIGKILL")
		for _, h := range rep.LastResort.Holders {
			if h.Holder.PID == 99 {
				assert.Contains(t, h.Reason, "a ublk server: it has /dev/ublkc0 open")
			}
		}
	})
}

// sandboxd's 500 ms reserve in a 600 ms window, a vulnerable kernel, no
// control device; ublkb0 is held by dm-0 (kernel state, no kill releases
// it), and the holders scan takes 1.5 s (250 processes, 6 ms each): what
// it did not read is a possible holder of both disks, set aside at the
// last resort. ublkb0 stays held, so the daemon is not asked to stop
// (HeldError), and with no control device nothing stops ublkb1 either:
// the fates of the processes set aside say so. Before, both said "set
// aside, the disk stops all the same", and neither disk stopped.
func TestLastResortSaysADiskSetAsideDoesNotStopWhenTheDaemonIsNotAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		f.hold(t, 0, "dm-0")
		cfg := f.config(vulnerable, nil, Config{NoControl: true, Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
		d := newMemDaemon(f.tree, 0, 1)
		defer d.close()
		td, err := New(d, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, 600*time.Millisecond)
		t.Log(rep.String())
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.Empty(t, d.Events(), "the daemon not asked")
		require.True(t, f.tree.HasDisk(0) && f.tree.HasDisk(1), "neither disk stopped")
		said := setAside(t, rep)
		require.Len(t, said, 2, "the processes not read, set aside from each disk")
		for id, reason := range said {
			assert.NotContains(t, reason, "stops all the same", "ublkb%d does not stop", id)
		}
		assert.Contains(t, said[0], "set aside, but the disk is still held by what the last resort does not release: not stopped")
		assert.Contains(t, said[1], "set aside, but the disk is not stopped: the devices still held keep the daemon from being asked to stop")
	})
}

// sandboxd's 500 ms reserve in a 600 ms window, a vulnerable kernel, no
// daemon configured (New(nil, …): the step only waits for the disks to
// go) and no control device (Config.NoControl, or one that cannot be
// opened); the holders scan takes 1.5 s (250 processes, 6 ms each), and
// what it did not read is a possible holder of ublkb0, set aside at the
// last resort. No device is left held, but there is no daemon to ask, and
// nothing stops ublkb0: it is live at the step's end, not_stopped. The
// fate of the processes set aside says so, and why. With a control device
// whose STOP_DEV fails, the fate says the last resort did not stop the
// disk and that the fallback alone may (its DEL_DEV removes it here).
// Before, each said "set aside, the disk stops all the same".
func TestLastResortSaysADiskSetAsideDoesNotStopWithNoDaemonAndNoControl(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg func(*fixture, *Config)
		why string
	}{
		"Config.NoControl": {func(_ *fixture, c *Config) { c.NoControl = true }, "no control device (Config.NoControl)"},
		"the control device not opened": {func(_ *fixture, c *Config) {
			c.hooks.OpenControl = func(context.Context) (ublkctl.Controller, error) { return nil, os.ErrPermission }
		}, "no control device (not opened: permission denied)"},
		"its STOP_DEV failed": {func(f *fixture, c *Config) {
			ctl := stopFails{&memControl{tree: f.tree, d: newMemDaemon(f.tree)}, 0}
			c.hooks.OpenControl = func(context.Context) (ublkctl.Controller, error) { return ctl, nil }
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0)
				cfg := f.config(vulnerable, nil, Config{Reserve: 500 * time.Millisecond})
				tc.cfg(f, &cfg)
				cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
				td, err := New(nil, cfg)
				require.NoError(t, err)

				rep, _, err := runFor(t, td, 600*time.Millisecond)
				t.Log(rep.String())
				if tc.why != "" {
					var left *IncompleteError
					require.ErrorAs(t, err, &left)
					require.True(t, f.tree.HasDisk(0), "nothing stops ublkb0")
					assert.Equal(t, VerdictNotStopped, rep.Device(0).Verdict)
				}
				said := setAside(t, rep)
				require.NotEmpty(t, said, "the processes not read, set aside")
				for _, reason := range said {
					assert.NotContains(t, reason, "stops all the same")
					if tc.why == "" {
						// The fallback's DEL_DEV removes it later: the fate
						// says what the last resort did, and who may stop it.
						assert.Contains(t, reason, "set aside, but the last resort did not stop the disk: no daemon is configured to ask to stop, "+
							"and its STOP_DEV failed; the control fallback alone may stop it")
						continue
					}
					assert.Contains(t, reason, "set aside, but the disk is not stopped: no daemon is configured to ask to stop, and "+tc.why)
				}
			})
		})
	}
}

// sandboxd's 500 ms reserve in a 600 ms window, a vulnerable kernel, a
// daemon that dies with the pod (doomed) and hangs with the disks' I/O:
// it takes the stop request and does nothing, and no STOP_DEV completes
// (the control's drain blocks). ublkb0 is held by dm-0, and the holders
// scan takes 1.5 s (250 processes, 6 ms each): what it did not read is a
// possible holder of both disks, set aside at the last resort. The last
// resort sends STOP_DEV to ublkb1 (free) and, under dm-0, to ublkb0;
// neither completes in its part, and both disks are left live. Its line
// the fates of what it set aside, the Report's line of ublkb0 and the
// *StoppedHeldError say the STOP_DEVs were sent, not that the disks
// stopped. Before, the line said
// "1 held device(s) stopped under their holders", both fates "set aside,
// the disk stops all the same", ublkb0's line "stopped under its holders
// by the last resort" and the error "devices still held stopped before
// the pod's SIGKILL", beside both devices left_live.
func TestLastResortSaysAStopDevNotCompleteIsSentNotStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		f.hold(t, 0, "dm-0")
		d := newMemDaemon(f.tree, 0, 1)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, drainBlocks: true}
		cfg := f.config(vulnerable, ctl, Config{Reserve: 500 * time.Millisecond})
		cfg.hooks.BeforeProcess = slowProcfs(t, f, 250, 6*time.Millisecond)
		td, err := New(d, cfg)
		require.NoError(t, err)
		doomedDaemon(td)

		rep, _, err := runFor(t, td, 600*time.Millisecond)
		t.Log(rep.String())
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		var under *StoppedHeldError
		require.ErrorAs(t, err, &under)
		assert.NotContains(t, under.Error(), "stopped before the pod's SIGKILL")
		assert.Contains(t, under.Error(), "STOP_DEV sent to devices still held before the pod's SIGKILL (no UBLK_F_USER_RECOVERY), "+
			"not seen complete when the step ended (the daemon had not answered their I/O in flight: they may be live): ublkb0 held by stacked dm-0")
		assert.Equal(t, VerdictLeftLive, rep.Device(0).Verdict)
		assert.Equal(t, VerdictLeftLive, rep.Device(1).Verdict)
		assert.Contains(t, rep.String(), "ublkb0: live -> dead, STOP_DEV pending; in flight 4 -> 4; 3 holders: left_live, "+
			"STOP_DEV sent under its holders by the last resort, not seen complete\n")
		line := rep.Step("last resort").Result
		assert.NotContains(t, line, "1 held device(s) stopped")
		assert.Contains(t, line, "0 held device(s) stopped under their holders, STOP_DEV sent and not complete for 1")
		assert.Contains(t, line, "sent and not complete for 1, failed for 0", "ublkb1's, free")
		said := setAside(t, rep)
		require.Len(t, said, 2, "the processes not read, set aside from each disk")
		for id, reason := range said {
			assert.NotContains(t, reason, "stops all the same", "ublkb%d is left live", id)
			assert.Contains(t, reason, "set aside; its STOP_DEV sent, not seen complete in the last resort's part", "ublkb%d", id)
		}
	})
}

// setAside returns the last resort's fates of the possible holders it set
// aside (the processes a cut scan did not read), by device ID.
func setAside(t *testing.T, rep *Report) map[int]string {
	t.Helper()
	require.NotNil(t, rep.LastResort, "the last resort ran")
	said := map[int]string{}
	for _, h := range rep.LastResort.Holders {
		if h.Holder.Kind == blockdev.Possible {
			said[h.Device] = h.Reason
		}
	}
	return said
}

// A ublk server, pid 99 (a per-device server whose PID the step does not
// know), holds ublkb0 open to the end; 60 s window, sandboxd's 500 ms
// reserve, a vulnerable kernel, and no daemon configured (New(nil, …):
// the step only waits for the disks to go). The last resort spares pid 99
// (killing a server with its device live is the host-crash path), and
// its fate, in the Report and the log's WARN, says that no daemon is
// asked to stop and what became of the disk: stopped by the last
// resort's STOP_DEV with a control device, not stopped without one.
// Before, both said "asking the daemon to stop releases its holds",
// where no daemon was asked, beside ublkb0 not_stopped without a control
// device.
func TestLastResortSaysNoDaemonReleasesASparedServersHolds(t *testing.T) {
	for name, tc := range map[string]struct {
		noControl bool
		fate      string
		stopped   bool
	}{
		"Config.NoControl": {true, ", but the disk is not stopped: no daemon is configured to ask to stop, and no control device (Config.NoControl)", false},
		"a control device": {false, ", the disk stops all the same", true},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, d, srv, pins, _, _ := ublkServerHolder(t)
				logs := &bytes.Buffer{}
				var ctl *memControl
				if !tc.noControl {
					ctl = &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}
				}
				td, err := New(nil, f.config(vulnerable, ctl, Config{NoControl: tc.noControl, Reserve: 500 * time.Millisecond,
					PollInterval: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))}))
				require.NoError(t, err)
				td.cfg.killHolders = func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate) {
					return killPinned(ctx, procRoot, held, devs, daemon, func(pid int) (pinned, error) {
						if p := pins[pid]; p != nil {
							return p, nil
						}
						return nil, os.ErrProcessDone
					})
				}

				rep, _, _ := runFor(t, td, 60*time.Second)
				t.Log(rep.String())
				assert.Empty(t, srv.sent, "pid 99 is ublkb0's server: not SIGKILLed")
				assert.Equal(t, tc.stopped, !f.tree.HasDisk(0), "ublkb0 stopped")
				require.NotNil(t, rep.LastResort, "the last resort ran")
				require.Len(t, rep.LastResort.Holders, 1)
				fate := rep.LastResort.Holders[0]
				assert.Equal(t, 99, fate.Holder.PID)
				assert.NotContains(t, fate.Reason, "asking the daemon to stop")
				assert.True(t, strings.HasSuffix(fate.Reason, "no daemon is configured to ask to stop: nothing asks it to release its holds, "+
					"which do not keep the disk from stopping"+tc.fate), "%s", fate.Reason)
				assert.NotContains(t, logs.String(), "asking the daemon to stop")
				assert.Contains(t, logs.String(), "no daemon is configured to ask to stop: nothing asks it to release its holds")
			})
		})
	}
}
