//go:build linux

package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// The step is limited to ublkb0 (Config.Devices), and its daemon, hung on
// a vulnerable kernel, also serves ublkb1, live: it has /dev/ublkc1 open,
// which the driver lets only a device's server open. The control fallback
// stops ublkb0, and then no device of the step is live; but the daemon is
// not killed while it still serves a live disk, found by its open char
// devices: ublkb1 joins the Report, left live, and Stop returns an
// UnsafeError naming it. Before, the step killed the daemon with ublkb1
// live: it looked at its own devices alone.
func TestDaemonServingALiveDiskBeyondTheStepsIsNotKilled(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2)%(1<<20))
	daemon, err := FindProcess(srv.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	rep, ctl, err := stopDisk0(t, daemon, sys, srv.Pid())
	assert.Contains(t, ctl.d.Events(), "STOP_DEV 0")
	assert.False(t, rep.Daemon.Killed, "the daemon still served ublkb1")
	assertDisk1LeftLive(t, rep, err)
	assert.Contains(t, rep.Device(1).Steps[0].Result, "/dev/ublkc1 open in the daemon")
	select {
	case <-srv.Done():
		t.Fatalf("the daemon exited: signalled %v", srv.Signaled(syscall.SIGKILL))
	default:
	}
}

// TestDaemonFuncsWithItsPidServingALiveDiskIsNotKilled is the same
// timeline with the daemon behind DaemonFuncs, as a supervisor that reaps
// its own children wires it: it kills through its own handle, and gives
// the step the PID with PidFunc. The step reads that PID's fds as a
// *Process's and does not kill a daemon that still serves a live disk.
func TestDaemonFuncsWithItsPidServingALiveDiskIsNotKilled(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2+7)%(1<<20))
	var killed atomic.Bool
	daemon := DaemonFuncs{
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-srv.Done():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		KillFunc: func(context.Context) error { killed.Store(true); return syscall.Kill(srv.Pid(), syscall.SIGKILL) },
		PidFunc:  srv.Pid,
	}
	rep, _, err := stopDisk0(t, daemon, sys, srv.Pid())
	assert.False(t, killed.Load(), "the daemon still served ublkb1")
	assertDisk1LeftLive(t, rep, err)
}

// The step is limited to ublkb0 (Config.Devices), and its daemon, hung on
// a vulnerable kernel, also serves ublkb1, whose STOP_DEV (the daemon's
// own) has begun: the kernel removed its disk from sysfs, but the I/O in
// flight, which only the daemon answers, has not drained, and the driver
// says LIVE. The control fallback stops ublkb0, and then no device of the
// step is live; the daemon, which still serves ublkb1, is not killed:
// ublkb1 joins the Report, left live, and Stop returns an UnsafeError
// naming it. Before, the look before the kill passed over every device
// with no disk as stopped, and killed the daemon with ublkb1 live, the
// host-crash path, Stop returning no error and the Report not naming it.
func TestDaemonServingADiskWhoseStopDrainsIsNotKilled(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2+11)%(1<<20))
	require.NoError(t, (&fakeublk.Tree{Root: sys}).StopDevice(1)) // its disk removed as STOP_DEV begins
	daemon, err := FindProcess(srv.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	rep, ctl, err := stopDisk0(t, daemon, sys, srv.Pid())
	assert.Contains(t, ctl.d.Events(), "STOP_DEV 0")
	assert.False(t, rep.Daemon.Killed, "the daemon still served ublkb1, live")
	assertDisk1LeftLive(t, rep, err)
	assert.Contains(t, rep.Device(1).Steps[0].Result, "/dev/ublkc1 open in the daemon, its disk gone from sysfs and the driver not saying DEAD")
	select {
	case <-srv.Done():
		t.Fatalf("the daemon exited: signalled %v", srv.Signaled(syscall.SIGKILL))
	default:
	}
}

// twoDiskDaemon starts a fake daemon, hung, that serves ublkb0 and ublkb1
// with their char devices open (minors from minor, unique to the test), and
// returns it with its sysfs root.
func twoDiskDaemon(t *testing.T, minor uint32) (*fakeublk.Child, string) {
	sys := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	srv, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Mode: fakeublk.Hung, EventLog: filepath.Join(t.TempDir(), "events"),
		Devices: []fakeublk.DeviceSpec{
			{ID: 0, Major: 4000, Minor: 0, CharMajor: 4091, CharMinor: minor},
			{ID: 1, Major: 4000, Minor: 1, CharMajor: 4091, CharMinor: minor + 1},
		}})
	if err != nil && os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device nodes: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, sys
}

// stopDisk0 runs the step limited to ublkb0 (Config.Devices) on a
// vulnerable kernel, with the control fallback in memory over sys and a
// procfs that shows the daemon pid alone (none when pid is 0), and
// returns its Report, the control it used and its error.
func stopDisk0(t *testing.T, daemon Daemon, sys string, pid int) (*Report, *memControl, error) {
	proc := t.TempDir()
	if pid > 0 {
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(proc, strconv.Itoa(pid))))
	}
	tree := &fakeublk.Tree{Root: sys}
	ctl := &memControl{tree: tree, d: newMemDaemon(tree)}
	td, err := New(daemon, Config{Devices: []int{0}, Reserve: 2 * time.Second, ExitWait: time.Nanosecond,
		hooks: ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: vulnerable,
			OpenControl: func(context.Context) (ublkctl.Controller, error) { return ctl, nil }}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := td.Stop(ctx)
	t.Log(rep.String())
	return rep, ctl, err
}

// assertDisk1LeftLive asserts that the step's Report and error account
// for ublkb1, the daemon's other disk: left live, named by an UnsafeError.
func assertDisk1LeftLive(t *testing.T, rep *Report, err error) {
	t.Helper()
	var unsafe *UnsafeError
	require.ErrorAs(t, err, &unsafe)
	assert.Equal(t, []int{1}, unsafe.Devices)
	require.NotNil(t, rep.Device(1), "the Report accounts for the daemon's other disk")
	assert.Equal(t, VerdictLeftLive, rep.Device(1).Verdict)
}

//	0 s      the step, limited to ublkb0 (Config.Devices), asks the daemon to stop
//	1 .. 2 s the daemon stops and deletes ublkb0; it still serves ublkb1, live
//	3 s      sysfs's block/ cannot be listed (EMFILE or ENOMEM in the server)
//	4 s      ExitWait is up: no device of the step is live
//	6 s      block/ can be listed again (or never, below)
//	60 s     the deadline
//
// On a vulnerable kernel the step does not kill the daemon while it cannot
// tell whether the daemon still serves a disk it does not have: killing it
// is no safer than the pod's SIGKILL, which ends it at the deadline anyway,
// and a daemon serving a live disk may still stop it in the time left. The
// Report says why it was not killed; once sysfs reads again the step finds
// ublkb1, served, and accounts for it, left live. Before, a failed listing
// read as "serves nothing more": the daemon was killed at 4 s with ublkb1
// live, the host-crash path.
func TestDaemonNotKilledWhileTheStepCannotTellWhatElseItServes(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the daemon holds")
	}
	t.Run("sysfs readable again", func(t *testing.T) {
		rep, events, err := cannotTell(t, 6*time.Second)
		assert.Equal(t, []string{"request", "stop 0", "delete 0"}, events, "the daemon is not killed")
		assert.Equal(t, VerdictStopped, rep.Device(0).Verdict)
		assertDisk1LeftLive(t, rep, err)
		served := rep.Step("served by the daemon")
		require.NotNil(t, served, "the Report says why the daemon was not killed")
		assert.Contains(t, served.Err, "not a directory")
		assert.Contains(t, served.Result, "not killed while the step cannot tell")
		assert.NotContains(t, rep.Note, "left running", "the last look could tell")
		assert.Empty(t, rep.Daemon.CannotTell)
	})
	t.Run("never readable again", func(t *testing.T) {
		rep, events, err := cannotTell(t, 0)
		assert.Equal(t, []string{"request", "stop 0", "delete 0"}, events, "the daemon is not killed")
		require.NoError(t, err, "every device of the step stopped")
		assert.True(t, rep.Daemon.LeftRunning)
		assert.Contains(t, rep.Daemon.CannotTell, "not a directory", "for a parent it dies with not to exit")
		assert.Nil(t, rep.Device(1), "never seen")
		assert.Contains(t, rep.Note, "the daemon was left running: whether it still serves a disk the step does not have could not be read at its last look (first not read at +4")
	})
}

// cannotTell runs the timeline above, sysfs's block/ readable again at
// back (never when zero), and returns the step's Report, the daemon's
// events when Stop returned, and Stop's error.
func cannotTell(t *testing.T, back time.Duration) (rep *Report, events []string, err error) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		_, node := makeServed(t, f, servedChar{id: 1, charMajor: 4091, salt: 13, inSysfs: true})
		// The test process stands for the daemon's process: it has
		// /dev/ublkc1 open, as the driver lets only its server.
		fd, oerr := unix.Open(node, unix.O_PATH|unix.O_CLOEXEC, 0)
		require.NoError(t, oerr)
		defer unix.Close(fd)
		pid := os.Getpid()
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(f.proc, strconv.Itoa(pid))))

		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		defer d.close()
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return pid }}
		block := filepath.Join(f.tree.Root, "block")
		time.AfterFunc(3*time.Second+time.Millisecond, func() { // not as a read runs
			require.NoError(t, os.Rename(block, block+".aside"))
			require.NoError(t, os.WriteFile(block, nil, 0o644))
		})
		if back > 0 {
			time.AfterFunc(back+time.Millisecond, func() {
				require.NoError(t, os.Remove(block))
				require.NoError(t, os.Rename(block+".aside", block))
			})
		}
		rep, events, err = stopUblkb0(t, f, d, daemon)
	})
	return rep, events, err
}

// Row 492 kept the daemon alive while sysfs could not be read to tell
// whether it serves a disk beyond the step's, but not while its fds could
// not be read: the daemon's /proc/PID/fd unreadable (EMFILE or ENOMEM in
// the server, the failure row 492 names; EACCES) read as no char device
// open, so the daemon serving ublkb1, live, was killed on a vulnerable
// kernel once the control fallback had stopped ublkb0: the host-crash
// path. The step now cannot tell then, as when sysfs cannot be read: the
// daemon is not killed, and the Report says why (Daemon.CannotTell).
func TestDaemonNotKilledWhileTheStepCannotReadItsFds(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2+21)%(1<<20))
	daemon, err := FindProcess(srv.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	proc := t.TempDir()
	pidDir := filepath.Join(proc, strconv.Itoa(srv.Pid()))
	require.NoError(t, os.Mkdir(pidDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(pidDir, "fd"), nil, 0o644)) // not a directory: its read fails
	tree := &fakeublk.Tree{Root: sys}
	ctl := &memControl{tree: tree, d: newMemDaemon(tree)}
	td, err := New(daemon, Config{Devices: []int{0}, Reserve: 2 * time.Second, ExitWait: time.Nanosecond,
		hooks: ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: vulnerable,
			OpenControl: func(context.Context) (ublkctl.Controller, error) { return ctl, nil }}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep, err := td.Stop(ctx)
	t.Log(rep.String())
	assert.Contains(t, ctl.d.Events(), "STOP_DEV 0")
	assert.False(t, rep.Daemon.Killed, "the step could not tell whether the daemon still served a disk: %s", rep.Daemon.KillError)
	assert.True(t, rep.Daemon.LeftRunning)
	assert.Contains(t, rep.Daemon.CannotTell, "not a directory")
	select {
	case <-srv.Done():
		t.Fatalf("the daemon exited: signalled %v", srv.Signaled(syscall.SIGKILL))
	default:
	}
	var unsafe *UnsafeError
	assert.False(t, errors.As(err, &unsafe), "ublkb1 was never seen: %v", err)
}

// The daemon serves ublkb0 and ublkb1, live; the step is limited to
// ublkb0 on a vulnerable kernel, and procfs does not show the daemon
// (mounted with hidepid=invisible, where a server without CAP_SYS_PTRACE
// sees no process of another user; or a procfs of another PID namespace):
// its /proc/PID/fd reads ENOENT while its pidfd says it runs. Once the
// control fallback has stopped ublkb0, the step cannot tell whether the
// daemon still serves ublkb1, and does not kill it: a daemon that exited
// needs no kill, and its exit, seen through its pidfd, ends the wait.
// Before, ENOENT read as "exited, serves none", and the daemon was
// SIGKILLed with ublkb1 live, the host-crash path.
func TestDaemonNotKilledWhileProcfsDoesNotShowIt(t *testing.T) {
	srv, sys := twoDiskDaemon(t, uint32(os.Getpid()*2+35)%(1<<20))
	daemon, err := FindProcess(srv.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	rep, ctl, _ := stopDisk0(t, daemon, sys, 0) // a procfs without the daemon
	assert.Contains(t, ctl.d.Events(), "STOP_DEV 0")
	assert.False(t, rep.Daemon.Killed, "procfs did not show whether the daemon still served a disk")
	assert.True(t, rep.Daemon.LeftRunning)
	assert.Contains(t, rep.Daemon.CannotTell, "no such file or directory")
	select {
	case <-srv.Done():
		t.Fatalf("the daemon exited: signalled %v", srv.Signaled(syscall.SIGKILL))
	default:
	}
}

//	0 s      the step, limited to ublkb0 (Config.Devices), asks the daemon to stop
//	1 .. 2 s the daemon stops and deletes ublkb0; it still serves ublkb1, live
//	4 s      ExitWait is up: no device of the step is live
//	60 s     the deadline
//
// The daemon is known by its functions alone (DaemonFuncs with no
// PidFunc): the step has no fds to read for what else it serves. A live
// disk the step does not have is then the daemon's as far as the step can
// tell, unless it is another server's (its /dev/ublkcN open outside the
// cgroup above the server's): on a vulnerable kernel the daemon is not
// killed while one is, and the Report says why (Daemon.CannotTell, the
// "served by the daemon" step). Before, the look was skipped without a
// PID, and the daemon was killed at 4 s with ublkb1 live, the host-crash
// path. Another server's disk keeps no daemon alive: the kill comes at 4 s.
func TestDaemonWithoutItsPIDIsNotKilledWhileALiveDiskMayBeItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	t.Run("a disk no process is seen serving", func(t *testing.T) {
		rep, events, err := withoutPID(t, false)
		assert.Equal(t, []string{"request", "stop 0", "delete 0"}, events, "the daemon is not killed")
		require.NoError(t, err, "every device of the step stopped")
		assert.False(t, rep.Daemon.Killed)
		assert.True(t, rep.Daemon.LeftRunning)
		assert.Contains(t, rep.Daemon.CannotTell, "the daemon's PID is not known")
		assert.Contains(t, rep.Daemon.CannotTell, "ublkb1, live and not the step's")
		served := rep.Step("served by the daemon")
		require.NotNil(t, served, "the Report says why the daemon was not killed")
		assert.Contains(t, served.Result, "not killed while the step cannot tell")
		assert.Contains(t, rep.Note, "the daemon was left running")
	})
	t.Run("another server's disk", func(t *testing.T) {
		rep, events, err := withoutPID(t, true)
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "kill", "exit killed"}, events)
		require.NoError(t, err)
		assert.True(t, rep.Daemon.Killed)
		assert.Empty(t, rep.Daemon.CannotTell)
		assert.Nil(t, rep.Step("served by the daemon"))
	})
}

// withoutPID runs the timeline above with a daemon known by its functions
// alone; with another, ublkb1's /dev/ublkc1 is open in pid 77, in another
// pod's cgroup (a fake procfs). It returns the step's Report, the daemon's
// events when Stop returned, and Stop's error.
func withoutPID(t *testing.T, another bool) (rep *Report, events []string, err error) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		procs := []fakeProc{{"self", "podA", false}}
		if another {
			procs = append(procs, fakeProc{"77", "podB", true})
		}
		makeServed(t, f, servedChar{id: 1, charMajor: 4091, salt: 41, inSysfs: true, procs: procs})
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		defer d.close()
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill} // no PidFunc
		rep, events, err = stopUblkb0(t, f, d, daemon)
	})
	return rep, events, err
}

// fakeProcess makes process pid of a fake procfs: its cgroup file holds
// cgroup, and, when open is not empty, fd 3 links to the node open.
func fakeProcess(t *testing.T, proc, pid, cgroup, open string) {
	t.Helper()
	dir := filepath.Join(proc, pid)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644))
	if open != "" {
		require.NoError(t, os.Symlink(open, filepath.Join(dir, "fd", "3")))
	}
}

// servedChar is ublkbID's char device as its server has it, for a test
// that tells one server's devices from another's by the processes that
// hold their /dev/ublkcN open.
type servedChar struct {
	id        int    // ublkbID; its disk is 4000:ID
	charMajor uint32 // the char major, one no real driver has
	salt      int    // the char minor is this process's pid*2+salt, unique to the test and the test process
	inSysfs   bool   // in the fake sysfs at once, its disk live; else the test adds it on its own timeline
	procs     []fakeProc
}

// fakeProc is a process made at once in the fake procfs: its pid (a
// number or "self"), the pod whose cgroup it is in, and whether it has
// the device's node open.
type fakeProc struct {
	pid, pod string
	holds    bool
}

// otherPodHolds is the step's process in pod A and pid 77, another
// server in pod B, holding the device's node.
var otherPodHolds = []fakeProc{{"self", "podA", false}, {"77", "podB", true}}

// daemonHolds is the step's process and the daemon's, pid 4242, both in
// pod A, the daemon holding the device's node: the device is its own.
var daemonHolds = []fakeProc{{"self", "podA", false}, {"4242", "podA", true}}

// stepAndDaemon is the step's process and the daemon's, pid 4242, both in
// pod A, neither holding the device's node (another server's, made later).
var stepAndDaemon = []fakeProc{{"self", "podA", false}, {"4242", "podA", false}}

// makeServed makes c in f: a char device node named ublkcID (its
// /dev/ublkcID) in a temporary directory, the device in f's sysfs when
// c.inSysfs, and c.procs in f's procfs. It returns the device's spec, for
// a test that adds it later, and the node. Making the node needs root.
func makeServed(t *testing.T, f *fixture, c servedChar) (fakeublk.DeviceSpec, string) {
	t.Helper()
	minor := uint32(os.Getpid()*2+c.salt) % (1 << 20)
	spec := fakeublk.DeviceSpec{ID: c.id, Major: 4000, Minor: uint32(c.id), CharMajor: c.charMajor, CharMinor: minor}
	if c.inSysfs {
		require.NoError(t, f.tree.AddDevice(spec))
	}
	node := filepath.Join(t.TempDir(), fmt.Sprintf("ublkc%d", c.id))
	require.NoError(t, unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(c.charMajor, minor))))
	for _, p := range c.procs {
		open := ""
		if p.holds {
			open = node
		}
		fakeProcess(t, f.proc, p.pid, "0::/kubepods/"+p.pod+"/ctr\n", open)
	}
	return spec, node
}

// fakeMapping gives process pid of a fake procfs a shared mapping of the
// node mapped, as a ublk server maps its /dev/ublkcN for the I/O
// descriptors: a line of its maps, and its map_files link to the node.
func fakeMapping(t *testing.T, proc, pid, mapped string) {
	t.Helper()
	dir := filepath.Join(proc, pid)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "map_files"), 0o755))
	line := fmt.Sprintf("7f2c4a000000-7f2c4a001000 r--s 00000000 00:05 1042                       %s\n", mapped)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(line), 0o644))
	require.NoError(t, os.Symlink(mapped, filepath.Join(dir, "map_files", "7f2c4a000000-7f2c4a001000")))
}

// stopUblkb0 runs the step over daemon (d behind it) and f, limited to
// ublkb0 on a vulnerable kernel, ExitWait 2 s and no control fallback, in
// a minute's window, and returns its Report, d's events when Stop
// returned, and Stop's error.
func stopUblkb0(t *testing.T, f *fixture, d *memDaemon, daemon Daemon) (*Report, []string, error) {
	t.Helper()
	td, err := New(daemon, f.config(vulnerable, nil, Config{Devices: []int{0}, ExitWait: 2 * time.Second, NoControl: true}))
	require.NoError(t, err)
	rep, _, err := runFor(t, td, time.Minute)
	t.Log(rep.String())
	return rep, d.Events(), err
}

// The step is limited to ublkb0 (Config.Devices); its daemon, pid 4242,
// keeps running once ublkb0 is gone, as it serves ublkb1, live, through
// its mapping of /dev/ublkc1 (the I/O descriptors, which every ublk server
// maps) and an io_uring with the char device among its registered files:
// it closed its fd, which the driver needs neither for the mapping nor for
// the ring's commands. A vulnerable kernel, ExitWait 2 s:
//
//	0 .. 2 s  the daemon stops and deletes ublkb0
//	4 s       ExitWait is up: no device of the step is live
//
// The look before the kill reads the daemon's mappings too: ublkb1 joins
// the Report, live, the daemon is not killed, and Stop returns an
// UnsafeError naming it. Before, the look read its fds alone: the daemon,
// serving ublkb1 live, was SIGKILLed at 4 s, the host-crash path, and Stop
// returned no error.
func TestDaemonServingALiveDiskThroughItsMappingIsNotKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the daemon maps")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		_, node := makeServed(t, f, servedChar{id: 1, charMajor: 4073, salt: 65, inSysfs: true, procs: stepAndDaemon})
		fakeMapping(t, f.proc, "4242", node)
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		defer d.close()
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		rep, events, err := stopUblkb0(t, f, d, daemon)
		assert.Equal(t, []string{"request", "stop 0", "delete 0"}, events, "the daemon is not killed")
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Equal(t, []int{1}, unsafe.Devices)
		require.NotNil(t, rep.Device(1), "the Report accounts for the disk the daemon serves")
		assert.Equal(t, VerdictLeftLive, rep.Device(1).Verdict)
		assert.Contains(t, rep.Device(1).Steps[0].Result, "/dev/ublkc1 mapped by the daemon")
	})
}

//	0 s      the step finds ublkb0 and asks the daemon to stop
//	1 .. 2 s the daemon stops and deletes ublkb0
//	2.5 s    the daemon adds a device for a VM whose start raced the drain:
//	         the kernel gives it the lowest free ID, 0 again; live
//	4.5 s    ExitWait is up: no device of the step is live
//	60 s     the deadline
//
// The daemon's PID is known, and it has /dev/ublkc0 open: the new ublkb0
// is its own, whatever the step made of the ID. On a vulnerable kernel the
// daemon is not killed while it serves it: the disk joins the Report,
// live, and Stop returns an UnsafeError naming it. Before, the look
// before the kill passed over every ID the step had a device for, a gone
// one included, and the daemon was killed at 4.5 s with the new ublkb0
// live, the host-crash path.
func TestDaemonServingANewDeviceWithAGoneOnesIDIsNotKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the daemon holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		spec, _ := makeServed(t, f, servedChar{id: 0, charMajor: 4091, salt: 53, inSysfs: true,
			procs: daemonHolds}) // the daemon: /dev/ublkc0 open
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		defer d.close()
		time.AfterFunc(2500*time.Millisecond, func() { require.NoError(t, f.tree.AddDevice(spec)) })
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		td, err := New(daemon, f.config(vulnerable, nil, Config{ExitWait: 2 * time.Second, NoControl: true}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		assert.Equal(t, []string{"request", "stop 0", "delete 0"}, d.Events(), "the daemon is not killed")
		var unsafe *UnsafeError
		require.ErrorAs(t, err, &unsafe)
		assert.Equal(t, []int{0}, unsafe.Devices)
		require.Len(t, rep.Devices, 2, "the ublkb0 that went, and the one the daemon serves now")
		assert.Equal(t, VerdictStopped, rep.Devices[0].Verdict)
		assert.Equal(t, VerdictLeftLive, rep.Devices[1].Verdict)
		assert.Contains(t, rep.Devices[1].Steps[0].Result, "/dev/ublkc0 open in the daemon")
	})
}

// The step is limited to ublkb0 and ublkb1 (Config.Devices), ublkb1 not
// in sysfs yet; the daemon (its PID not known: DaemonFuncs), cooperative,
// keeps running once ublkb0 is gone, as it serves more; ublkb2 is another
// server's, its /dev/ublkc2 open in pid 77 in another pod's cgroup. A
// vulnerable kernel, ExitWait 1 s, a minute's window:
//
//	0 .. 2 s  the daemon stops and deletes ublkb0
//	3 s       ExitWait is up, no device of the step live: the look before
//	          the kill tells ublkb2 another server's (a procfs pass); as it
//	          runs, the daemon adds ublkb1 (a VM whose start raced the drain)
//
// The daemon is not killed with ublkb1 live: a read after the look counts
// it, the control fallback stops it at its point (55 s), and only then is
// the daemon killed, and ublkb1 deleted. Before, the kill followed the look
// at once, on the read before it: the daemon SIGKILLed at 3 s with ublkb1
// live, the host-crash path, and Stop returned no error.
func TestDaemonNotKilledWithADeviceAddedDuringTheLookBeforeTheKill(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		makeServed(t, f, servedChar{id: 2, charMajor: 4083, salt: 53, inSysfs: true, procs: otherPodHolds})
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		t.Cleanup(d.close)
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill}
		cfg := f.config(vulnerable, &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}, Config{Devices: []int{0, 1}, ExitWait: time.Second})
		added := false
		cfg.hooks.BeforeProcess = func(dir string) {
			if !added && filepath.Base(dir) == "self" && !f.tree.HasChar(0) {
				added = true
				assert.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1}))
				d.event("add 1")
			}
		}
		td, err := New(daemon, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		require.True(t, added, "the look before the kill ran a procfs pass")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "add 1", "STOP_DEV 1", "kill", "exit killed", "DEL_DEV 1"}, d.Events(),
			"killed only once ublkb1 was stopped")
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill)
		assert.Equal(t, 56010*time.Millisecond, kill.Start.Sub(rep.Start), "ExitWait after the STOP_DEV at 55 s")
		assert.True(t, f.tree.HasDisk(2), "ublkb2, another server's, left alone")
	})
}

// The step is limited to ublkb0 (Config.Devices); its daemon, pid 4242,
// keeps running once ublkb0 is gone, as it serves ublkb1 (its /dev/ublkc1
// open in it), whose STOP_DEV, the daemon's own, has begun: its disk gone
// from sysfs, the driver saying LIVE. A vulnerable kernel, ExitWait 1 s,
// a minute's window:
//
//	0 .. 2 s  the daemon stops and deletes ublkb0
//	3 s       no device of the step live: the look before the kill finds
//	          ublkb1 served and not DEAD (row 1413): the daemon not killed
//	10 s      ublkb1's STOP_DEV completes (the daemon answered its I/O in
//	          flight): DEAD, its char device kept (no DEL_DEV yet)
//
// The step asks the driver about ublkb1 every poll, finds it DEAD at 10 s,
// and kills the daemon once ExitWait is over, no device live; the
// Report says ublkb1's STOP_DEV was seen complete. Before, ublkb1 was
// never read again: the daemon was left running to the deadline and
// ublkb1 reported left_live, Stop returning an UnsafeError for a device
// that was stopped.
func TestDiskServedBeyondTheStepsSeenStoppedLetsTheDaemonBeKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the daemon holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		makeServed(t, f, servedChar{id: 1, charMajor: 4081, salt: 57, inSysfs: true, procs: daemonHolds})
		require.NoError(t, f.tree.StopDevice(1)) // its disk removed as STOP_DEV begins
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		t.Cleanup(d.close)
		time.AfterFunc(10*time.Second, func() { d.kstate.set(1, ublkctl.StateDead) })
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
		td, err := New(daemon, f.config(vulnerable, &memControl{tree: f.tree, d: d}, Config{Devices: []int{0}, ExitWait: time.Second}))
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		assert.NoError(t, err)
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill, "the daemon killed once ublkb1 is DEAD")
		dev := rep.Device(1)
		require.NotNil(t, dev)
		assert.NotEqual(t, VerdictLeftLive, dev.Verdict)
		i := slices.IndexFunc(dev.Steps, func(s StepResult) bool { return s.Name == "STOP_DEV complete" })
		require.GreaterOrEqual(t, i, 0, "%+v", dev.Steps)
		seen := dev.Steps[i]
		assert.Equal(t, "not the step's, its disk gone when the step found it; GET_DEV_INFO says dead now: the kernel completed it", seen.Result)
		assert.False(t, seen.Start.Before(rep.Start.Add(10*time.Second)), "seen once DEAD")
		assert.False(t, kill.Start.Before(seen.Start.Add(time.Second)), "killed once ExitWait is over, with no device live")
	})
}

// The step is limited to ublkb0 (Config.Devices); the daemon (its PID not
// known: DaemonFuncs), cooperative, keeps running once ublkb0 is gone, as
// it serves more; ublkb2 is another server's, its /dev/ublkc2 open in pid
// 77 in another pod's cgroup. A vulnerable kernel, ExitWait 1 s, a
// minute's window:
//
//	0 .. 2 s  the daemon stops and deletes ublkb0
//	3 s       ExitWait is up, no device of the step live: the look before
//	          the kill tells ublkb2 another server's (a procfs pass); as it
//	          runs, the daemon adds and starts ublkb1, not in Config.Devices
//
// The daemon is not killed with ublkb1 live: a sysfs read after the look
// finds a disk it did not look at, and the next poll's look cannot tell
// ublkb1 from the daemon's own (no process seen with /dev/ublkc1 open), so
// the daemon is left running. Before, row 1414's read after the look read
// the step's devices alone: the daemon was SIGKILLed at 3 s with ublkb1
// live, the host-crash path, and Stop returned no error.
func TestDaemonNotKilledWithAnUnlistedDiskAddedDuringTheLookBeforeTheKill(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		ublkb2, _ := makeServed(t, f, servedChar{id: 2, charMajor: 4079, salt: 59, inSysfs: true, procs: otherPodHolds})
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		t.Cleanup(d.close)
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill}
		cfg := f.config(vulnerable, &memControl{tree: f.tree, d: d, stopIn: 10 * time.Millisecond}, Config{Devices: []int{0}, ExitWait: time.Second})
		added := false
		cfg.hooks.BeforeProcess = func(dir string) {
			if !added && filepath.Base(dir) == "self" && !f.tree.HasChar(0) {
				added = true
				assert.NoError(t, f.tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4079, CharMinor: ublkb2.CharMinor + 1}))
				d.event("add 1")
			}
		}
		td, err := New(daemon, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err, "every device of the step stopped")
		require.True(t, added, "the look before the kill ran a procfs pass")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "add 1"}, d.Events(), "the daemon is not killed with ublkb1 live")
		assert.False(t, rep.Daemon.Killed)
		assert.True(t, rep.Daemon.LeftRunning)
		assert.Contains(t, rep.Note, "the daemon was left running")
		assert.Regexp(t, `: ublkb1(, ublkb2)?, live and not the step's, not known to be another server's, may be its$`, rep.Daemon.CannotTell)
		assert.True(t, f.tree.HasDisk(1) && f.tree.HasDisk(2), "ublkb1 and ublkb2 live, neither the step's")
	})
}

// The step is limited to ublkb0 (Config.Devices); the daemon (its PID not
// known: DaemonFuncs), cooperative, keeps running once ublkb0 is gone, as
// it serves more; ublkb2 is another server's, its /dev/ublkc2 open in pid
// 77 in another pod's cgroup. A vulnerable kernel, ExitWait 1 s, a
// minute's window:
//
//	0 .. 2 s  the daemon stops and deletes ublkb0
//	3 s       ExitWait is up, no device of the step live: the look before
//	          the kill tells ublkb2 another server's (a procfs pass); as it
//	          runs, the daemon exits by itself
//
// The step does not kill a daemon that has exited: the Report says it
// exited, not that the step killed it, and has no "kill daemon" step.
// Before, the kill followed the look on the exit check made before it:
// Kill was called on the exited daemon (which a real Process answers with
// no error), and the Report and the log said the step killed it.
func TestDaemonThatExitsDuringTheLookBeforeTheKillIsNotKilled(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node another server holds")
	}
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		makeServed(t, f, servedChar{id: 2, charMajor: 4077, salt: 61, inSysfs: true, procs: otherPodHolds})
		d := newMemDaemon(f.tree, 0)
		d.servesMore = true
		t.Cleanup(d.close)
		daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill}
		cfg := f.config(vulnerable, nil, Config{Devices: []int{0}, ExitWait: time.Second, NoControl: true})
		exited := false
		cfg.hooks.BeforeProcess = func(dir string) {
			if !exited && filepath.Base(dir) == "self" && !f.tree.HasChar(0) {
				exited = true
				d.exit("by itself")
				synctest.Wait() // the step's exit watcher has seen it
			}
		}
		td, err := New(daemon, cfg)
		require.NoError(t, err)

		rep, _, err := runFor(t, td, time.Minute)
		t.Log(rep.String())
		require.NoError(t, err)
		require.True(t, exited, "the look before the kill ran a procfs pass")
		assert.Equal(t, []string{"request", "stop 0", "delete 0", "exit by itself"}, d.Events(), "no kill sent to the exited daemon")
		assert.False(t, rep.Daemon.Killed, "the step did not kill it")
		assert.True(t, rep.Daemon.Exited)
		assert.Nil(t, rep.Step("kill daemon"))
		assert.True(t, f.tree.HasDisk(2), "ublkb2, another server's, left alone")
	})
}

// The daemon, pid 4242, forked pid 4343 to serve ublkb1 (as ublksrv forks
// a server a device); 4343 maps /dev/ublkc1 for the I/O descriptors and
// closed its fd (row 1742: the driver needs neither for the mapping nor
// for an io_uring with the device among its registered files). Both are in
// the server's cgroup. At discovery the step tells its own devices from
// another server's: ublkb1 is its own, its server inside the cgroup.
// Before, the pass read fds alone: ublkb1 was open in no process, the
// daemon's own fds and mappings held none of it, and the step's own disk
// was "another server's device, left alone" (its holders not waited for,
// the daemon's kill not held back by it).
func TestDiscoveryTellsADeviceItsServerOnlyMapsTheStepsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device node the per-device server maps")
	}
	f := newFixture(t)
	procs := append(slices.Clone(stepAndDaemon), fakeProc{"4343", "podA", false})
	_, node := makeServed(t, f, servedChar{id: 1, charMajor: 4069, salt: 71, inSysfs: true, procs: procs})
	fakeMapping(t, f.proc, "4343", node)
	devs, err := scanDevices(sysfs{root: f.tree.Root})
	require.NoError(t, err)
	others, untold := othersDevices(t.Context(), f.tree.Root, f.proc, devs, 4242, nil, nil)
	assert.Empty(t, untold, "a pass not cut short tells every device")
	assert.Empty(t, others, "ublkb1 is the step's: its server, in the server's cgroup, maps its /dev/ublkc1")
}
