//go:build linux

package ublk_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/loopdev"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// outsiderCgroup moves pid into a new cgroup beside this process's own, in
// a hierarchy where this process is not at the root, and returns its path:
// a process there is outside the server's cgroup, as a VMM of another pod
// would be. It skips when there is no such hierarchy to write to.
func outsiderCgroup(t *testing.T, pid int) string {
	t.Helper()
	return movedCgroup(t, pid, path.Dir)
}

// farCgroup moves pid into a new cgroup at the root of a hierarchy where
// this process is two levels below it or more: outside the cgroup above
// this process's too (another pod's, in Kubernetes).
func farCgroup(t *testing.T, pid int) string {
	t.Helper()
	return movedCgroup(t, pid, func(mine string) string {
		if path.Dir(path.Dir(mine)) == "/" && path.Dir(mine) != "/" {
			return "/"
		}
		return "" // not deep enough here
	})
}

// movedCgroup moves pid into a new cgroup under parent(this process's)
// in a writable hierarchy where this process is below the root, and
// returns its path; parent returning "" skips a hierarchy.
func movedCgroup(t *testing.T, pid int, parent func(mine string) string) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		ctrl, mine := parts[1], parts[2]
		for _, m := range strings.Split(string(mounts), "\n") {
			// 36 25 0:31 / /sys/fs/cgroup/memory rw,... - cgroup cgroup rw,memory
			fields := strings.Fields(m)
			sep := -1
			for i, f := range fields {
				if f == "-" {
					sep = i
					break
				}
			}
			if sep < 0 || len(fields) < sep+4 || fields[3] != "/" {
				continue
			}
			fstype, opts := fields[sep+1], strings.Split(fields[sep+3], ",")
			v2 := ctrl == "" && fstype == "cgroup2"
			v1 := fstype == "cgroup" && ctrl != ""
			if v1 {
				v1 = true
				for _, c := range strings.Split(ctrl, ",") {
					found := false
					for _, o := range opts {
						found = found || o == c
					}
					v1 = v1 && found
				}
			}
			if !v1 && !v2 {
				continue
			}
			under := parent(mine)
			if under == "" {
				continue
			}
			// A name of its own: one named for the pid alone met a cgroup
			// an earlier run left with a pid since reused (EEXIST).
			dir, err := os.MkdirTemp(filepath.Join(fields[4], under), fmt.Sprintf("drainkit-outsider-%d-", pid))
			if err != nil {
				continue
			}
			home := filepath.Join(fields[4], mine, "cgroup.procs")
			t.Cleanup(func() { removeCgroup(t, dir, home) })
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				continue
			}
			return path.Join(under, filepath.Base(dir))
		}
	}
	realpart.Missing(t, "no writable cgroup hierarchy where this process is below the root")
	return ""
}

// removeCgroup removes the cgroup dir that movedCgroup made. A process
// still in it (the holder, whose own cleanup, registered before, runs
// after this one) is moved back to home, this process's cgroup.procs,
// first: otherwise the rmdir fails (EBUSY) and the cgroup is left behind.
func removeCgroup(t *testing.T, dir, home string) {
	for range 100 {
		err := os.Remove(dir)
		if err == nil || os.IsNotExist(err) {
			return
		}
		if procs, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, pid := range strings.Fields(string(procs)) {
				_ = os.WriteFile(home, []byte(pid), 0o644) // it may have exited meanwhile
			}
		}
		time.Sleep(10 * time.Millisecond) // an exiting process leaves its cgroup a moment late
	}
	t.Errorf("cgroup %s not removed: %v", dir, os.Remove(dir))
}

// ownProcfs is a procfs of this process and pids alone: for each, an entry
// linked to its /proc/PID, and "self" naming this process, as /proc does.
// A step run over it scans, and at the last resort may kill, only the
// processes the test started: a process of another test on the machine
// whose holds the scan cannot read in time (a possible holder of every
// disk, and doomed when it shares this process's cgroup) is neither
// waited for nor killed.
func ownProcfs(t *testing.T, pids ...int) string {
	t.Helper()
	dir := t.TempDir()
	self := os.Getpid()
	for _, pid := range append([]int{self}, pids...) {
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(dir, strconv.Itoa(pid))))
	}
	require.NoError(t, os.Symlink(strconv.Itoa(self), filepath.Join(dir, "self")))
	return dir
}

// At the last resort, a holder in the server's own cgroup is killed (the
// pod's SIGKILL would end it anyway) and one in another cgroup is left
// alone; the fates say which and why.
func TestLastResortKillsOnlyHoldersInTheServersCgroup(t *testing.T) {
	node, dev := loopdev.Attach(t)
	doomed, _ := loopdev.Hold(t, node)
	outsider, _ := loopdev.Hold(t, node)
	other := outsiderCgroup(t, outsider.Process.Pid)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs, err := blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	var held []ublk.Holder
	for _, h := range hs { // udev may probe the device too: keep only ours
		if h.PID == doomed.Process.Pid || h.PID == outsider.Process.Pid {
			held = append(held, ublk.Holder(h))
		}
	}
	require.Len(t, held, 2)

	server, fates := ublk.KillDoomed(ctx, "/proc", map[int][]ublk.Holder{7: held}, map[blockdev.DevNum]int{dev: 7}, 0)
	assert.NotEmpty(t, server)
	require.Len(t, fates, 2)
	byPID := map[int]ublk.HolderFate{}
	for _, f := range fates {
		byPID[f.Holder.PID] = f
		assert.Equal(t, 7, f.Device)
	}
	k := byPID[doomed.Process.Pid]
	assert.True(t, k.Doomed && k.Signalled && k.Killed, "%+v", k)
	assert.Contains(t, k.Reason, "in the server's cgroup")
	assert.Equal(t, server, k.Cgroup)
	s := byPID[outsider.Process.Pid]
	assert.False(t, s.Doomed || s.Signalled || s.Killed, "%+v", s)
	assert.Contains(t, s.Reason, "outside the server's cgroup")
	assert.Contains(t, s.Cgroup, other)

	err = doomed.Wait()
	ws := doomed.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the doomed holder was SIGKILLed: %v %v", ws, err)
	hs, err = blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	still := false
	for _, h := range hs {
		still = still || h.PID == outsider.Process.Pid
	}
	assert.True(t, still, "the outsider is alive and still holds the device: %v", hs)
}

func fateOf(rep *ublk.Report, pid int) *ublk.HolderFate {
	if rep.LastResort == nil {
		return nil
	}
	for i := range rep.LastResort.Holders {
		if rep.LastResort.Holders[i].Holder.PID == pid {
			return &rep.LastResort.Holders[i]
		}
	}
	return nil
}

// The step runs the last resort by default: a VMM in the server's cgroup
// that never closes the disk is killed at the last-resort point, then the
// daemon is asked to stop and stops cleanly, long before the deadline.
func TestStepLastResortKillsDoomedVMMThenStopsTheDaemon(t *testing.T) {
	rep, vmm := lastResortKillsDoomed(t, loopdev.Hold, "fd")
	f := fateOf(rep, vmm.Process.Pid)
	assert.Contains(t, f.Reason, "in the server's cgroup")
	lr, req := rep.Step("last resort"), rep.Step("request stop")
	require.NotNil(t, lr)
	require.NotNil(t, req, "the daemon was asked to stop once the VMM was gone")
	assert.False(t, req.Start.Before(lr.Start.Add(lr.Duration)), "asked after the last resort")
	// At the end of the holder wait (HolderWait, 1 s), not at the
	// last-resort point its deadline sets (20 s less the 10 s reserve).
	assert.False(t, lr.Start.Before(rep.Start.Add(time.Second)), "not before the holder wait's end")
	assert.True(t, lr.Start.Before(rep.Deadline.Add(-10*time.Second)), "before the last-resort point: %v after the start", lr.Start.Sub(rep.Start))
	assert.True(t, rep.Daemon.Exited && !rep.Daemon.Killed)
}

// outsiderRun is what outsiderHolds ran: the step's Report and error, the
// outsider, the daemon, its event log and the outsider's cgroup.
type outsiderRun struct {
	rep      *ublk.Report
	err      error
	outsider *exec.Cmd
	daemon   *fakeublk.Child
	log      string
	cgroup   string
}

// outsiderHolds runs the step, last resort on, over a real loop device that
// a process started with hold holds from another cgroup (outsiderCgroup).
func outsiderHolds(t *testing.T, hold func(testing.TB, string) (*exec.Cmd, io.WriteCloser)) outsiderRun {
	t.Helper()
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	outsider, _ := hold(t, node)
	other := outsiderCgroup(t, outsider.Process.Pid)

	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, d.Pid(), outsider.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 10*time.Second)
	t.Log(rep.String())
	return outsiderRun{rep: rep, err: err, outsider: outsider, daemon: d, log: log, cgroup: other}
}

// A VMM of another cgroup (another pod, the host) is never killed: the
// last resort reports it, and the step stays conservative: the daemon keeps
// serving it and is never asked to stop.
func TestStepLastResortSparesVMMOutsideTheServersCgroup(t *testing.T) {
	o := outsiderHolds(t, loopdev.Hold)
	rep, err, outsider, d, log, other := o.rep, o.err, o.outsider, o.daemon, o.log, o.cgroup
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	f := fateOf(rep, outsider.Process.Pid)
	require.NotNil(t, f, "the outsider is reported")
	assert.False(t, f.Doomed || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "outside the server's cgroup")
	assert.Contains(t, f.Cgroup, other)
	require.NoError(t, outsider.Process.Signal(syscall.Signal(0)), "the outsider is alive")
	assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
	assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the outsider")
	assert.NotContains(t, events(t, log), "sigterm", "and was never asked to stop")
}

// A VMM that maps the disk and closes its fd holds it as surely as one
// with the fd open (its pages fail once the device stops): the step finds
// it, waits for it, and at the last resort kills it as it kills an fd
// holder in its cgroup, then asks the daemon to stop.
func TestStepLastResortKillsDoomedMappingThenStopsTheDaemon(t *testing.T) {
	lastResortKillsDoomed(t, loopdev.Map, "mapped")
}

// lastResortKillsDoomed runs the step over a real loop device that a VMM
// started with hold holds (as kind says), in this process's cgroup, until
// the last resort, on by default: the VMM is named, SIGKILLed, and the
// daemon, asked to stop after it, exits by itself. It returns the Report
// and the VMM.
func lastResortKillsDoomed(t *testing.T, hold func(testing.TB, string) (*exec.Cmd, io.WriteCloser), kind string) (*ublk.Report, *exec.Cmd) {
	t.Helper()
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	vmm, _ := hold(t, node)

	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, d.Pid(), vmm.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	require.True(t, td.LastResort(), "on by default on a vulnerable kernel")
	rep, err := run(t, td, 20*time.Second)
	t.Log(rep.String())
	require.NoError(t, err)
	require.NotNil(t, rep.LastResort, "the last resort ran: the %s holder was seen", kind)
	f := fateOf(rep, vmm.Process.Pid)
	require.NotNil(t, f, "the VMM is named: %+v", rep.LastResort.Holders)
	assert.Equal(t, kind, f.Holder.Kind)
	if kind != blockdev.Possible { // a possible holder's Detail says what is not known
		assert.Contains(t, f.Holder.Detail, filepath.Base(node))
	}
	assert.True(t, f.Doomed && f.Killed, "%+v", f)
	_ = vmm.Wait()
	ws := vmm.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the VMM was SIGKILLed: %v", ws)
	var kinds []string
	for _, h := range rep.Device(0).Holders {
		kinds = append(kinds, h.Kind)
	}
	assert.Contains(t, kinds, kind, "the device's report names the holder")
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	<-d.Done()
	assert.Equal(t, 0, d.ExitCode(), "the daemon exited by itself")
	assert.Contains(t, events(t, log), "sigterm")
	return rep, vmm
}

// A loop device backed by the disk (losetup /dev/loopN /dev/ublkb0) holds
// it in the kernel with no process: the step reports it, the last resort
// kills nothing for it, and the daemon keeps serving the disk, never asked
// to stop (HeldError). The loop device is real; the fake sysfs the step
// reads shows its backing file as the kernel does.
func TestStepReportsALoopDeviceOnTheDiskAndKillsNothing(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	upper, _ := loopdev.AttachFile(t, node)
	name := filepath.Base(upper)
	backing, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "block", name, "loop"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sys, "block", name, "loop", "backing_file"), backing, 0o644))

	rep, held := heldByKernelState(t, d, sys, ownProcfs(t, d.Pid()))
	assert.Contains(t, held.Error(), "loop "+name+" (backing file "+node+")")
	want := ublk.Holder{Kind: "loop", Detail: name + " (backing file " + node + ")"}
	assert.Contains(t, rep.Device(0).Holders, want)
	require.NotNil(t, rep.LastResort)
	require.Len(t, rep.LastResort.Holders, 1, "%+v", rep.LastResort.Holders)
	f := rep.LastResort.Holders[0]
	assert.Equal(t, want, f.Holder)
	assert.False(t, f.Doomed || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "kernel state")
	assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
	assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the loop device")
	assert.NotContains(t, events(t, log), "sigterm", "and was never asked to stop")
}

// A VMM that registers the disk in an io_uring's fixed files and closes its
// fd (QEMU's io_uring, SPDK, fio's registerfiles) holds it through the ring,
// with no fd on it: with the last resort off, the step names it and never
// asks the daemon to stop. Before, the scan saw no holder and the daemon
// was asked to stop under it.
func TestStepNamesARingHolderAndNeverStopsTheDaemonUnderIt(t *testing.T) {
	node, dev := loopdev.Attach(t)
	d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
		fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
	vmm, _ := loopdev.Ring(t, node)

	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoLastResort: true}, ublkhook.Hooks{OpenControl: noControl, SysfsRoot: sys, KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 10*time.Second)
	t.Log(rep.String())
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	var mine []ublk.Holder
	for _, h := range held.Holders[0] {
		if h.PID == vmm.Process.Pid {
			mine = append(mine, h)
		}
	}
	require.Len(t, mine, 1, "the VMM is named: %v", held.Holders[0])
	assert.Equal(t, "ring", mine[0].Kind)
	assert.Contains(t, held.Error(), fmt.Sprintf("pid %d", vmm.Process.Pid))
	assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
	assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the VMM")
	assert.NotContains(t, events(t, log), "sigterm", "and was never asked to stop")
}

// At the last resort a ring holder in the server's cgroup is a process like
// an fd holder: killed (its exit closes the ring and releases the disk),
// then the daemon is asked to stop. Before, it was spared as if it were
// kernel state, and the daemon kept serving a doomed VMM until SIGKILL.
func TestStepLastResortKillsDoomedRingHolderThenStopsTheDaemon(t *testing.T) {
	lastResortKillsDoomed(t, loopdev.Ring, "ring")
}

// lockedRing is loopdev.RingLocked as a holder of lastResortKillsDoomed: a
// VMM holding the disk through an io_uring whose lock it keeps, so the
// kernel never lists the ring's files.
func lockedRing(t testing.TB, node string) (*exec.Cmd, io.WriteCloser) {
	l := loopdev.RingLocked(t, node)
	return l.Cmd, l.Stdin
}

// A VMM holding the disk through an io_uring whose lock is held all along
// (a busy or stuck ring: the kernel lists none of its registered files)
// may hold the disk: the step waits for it through the holder wait, and at
// the last resort, in the server's cgroup, kills it as it kills a known
// ring holder (doomed anyway, and what it holds still not known when
// checked again), then asks the daemon to stop. Before, the scan found no
// holder and the daemon was asked to stop at once, under the ring.
func TestStepLastResortKillsDoomedPossibleHolderThenStopsTheDaemon(t *testing.T) {
	rep, vmm := lastResortKillsDoomed(t, lockedRing, blockdev.Possible)
	f := fateOf(rep, vmm.Process.Pid)
	// never "the kernel waited for the ring's lock": its reads end at once
	// (too busy a machine to make them within blockdev.RingWait says so)
	assert.Regexp(t, `^io_uring fd \d+: (the registered files not listed by the kernel|fdinfo not read within 100ms \(not waiting in the kernel: the machine was too busy)`, f.Holder.Detail)
	assert.Contains(t, f.Reason, "it may hold the disk")
}

// A process outside the server's cgroup (another pod, the host) that may
// hold the disk through a ring the kernel never lists is waited for
// through the holder wait, then set aside: never killed, and the devices
// stop all the same, the daemon asked to stop and exiting with none live.
// Sparing its disk, as the first version of the rule did (HeldError, the
// daemon never asked), leaves the daemon to die at the pod's SIGKILL with
// the disk live, the host-crash path, for a process only not known to hold
// it: a hung NFS mount on the node would do that to every drain.
func TestStepSetsAsideAPossibleHolderOutsideItsCgroupAndStopsTheDaemon(t *testing.T) {
	o := outsiderHolds(t, lockedRing)
	rep, err, outsider, d, log, other := o.rep, o.err, o.outsider, o.daemon, o.log, o.cgroup
	require.NoError(t, err)
	holders := rep.Step("holders")
	require.NotNil(t, holders)
	assert.Contains(t, holders.Err, "still held open", "waited for until the last-resort point")
	f := fateOf(rep, outsider.Process.Pid)
	require.NotNil(t, f, "the outsider is reported")
	assert.Equal(t, blockdev.Possible, f.Holder.Kind)
	assert.False(t, f.Doomed || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "outside the server's cgroup")
	assert.Contains(t, f.Reason, "set aside, the disk stops all the same")
	assert.Contains(t, f.Cgroup, other)
	aside := rep.Step("possible holders")
	require.NotNil(t, aside, "the Report names what was set aside")
	assert.Contains(t, aside.Err, fmt.Sprintf("pid %d (", outsider.Process.Pid))
	assert.Contains(t, aside.Err, "possible io_uring fd")
	require.NoError(t, outsider.Process.Signal(syscall.Signal(0)), "the outsider is alive")
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	<-d.Done() // Stop saw its exit through a pidfd; the reaper may come later
	assert.Equal(t, 0, d.ExitCode(), "the daemon exited by itself")
	assert.Contains(t, events(t, log), "sigterm", "asked to stop")
}

// The last resort never kills the daemon, even when it holds a disk (or
// may: a ring of its own the kernel did not list) and shares the server's
// cgroup: killing it with a live device is the host-crash path itself.
// Before, a daemon holding its own disk was SIGKILLed as a doomed VMM.
func TestLastResortNeverKillsTheDaemon(t *testing.T) {
	node, dev := loopdev.Attach(t)
	daemon, _ := loopdev.Hold(t, node) // a daemon with its own disk open
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held := []ublk.Holder{{PID: daemon.Process.Pid, Comm: "ublkd", Kind: blockdev.FD, Detail: "fd 3 -> " + node}}
	_, fates := ublk.KillDoomed(ctx, "/proc", map[int][]ublk.Holder{0: held}, map[blockdev.DevNum]int{dev: 0}, daemon.Process.Pid)
	require.Len(t, fates, 1)
	assert.False(t, fates[0].Killed || fates[0].Signalled, "%+v", fates[0])
	assert.Contains(t, fates[0].Reason, "the ublk daemon itself")
	require.NoError(t, daemon.Process.Signal(syscall.Signal(0)), "the daemon is alive")
}

// A file system on the disk that no mountinfo shows still holds it: one
// unmounted lazily (umount -l) while a file on it is open lives on, in no
// mount namespace, and a btrfs mount shows an anonymous device number, not
// the disk's. The step names both, kills nothing for them and never asks
// the daemon to stop under them (HeldError). Before, the scan found no
// holder, and the daemon was asked to stop: the file system's I/O failed.
// The file systems are real; the fake sysfs the step reads shows the
// lazily unmounted one as the kernel's does.
func TestStepNamesAFileSystemNoMountinfoShows(t *testing.T) {
	for _, tc := range []struct {
		fstype string
		lazy   bool
		want   func(dir string) ublk.Holder
	}{
		{"ext4", true, func(string) ublk.Holder {
			return ublk.Holder{Kind: "filesystem", Detail: "ext4 on ublkb0 (sysfs fs/ext4/ublkb0)"}
		}},
		{"btrfs", false, func(dir string) ublk.Holder { return ublk.Holder{Kind: "mount", Detail: dir} }},
	} {
		t.Run(tc.fstype, func(t *testing.T) {
			node, dev, dir := loopdev.Mounted(t, tc.fstype)
			d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
				fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
			if tc.lazy {
				fd, err := unix.Open(filepath.Join(dir, "f"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
				require.NoError(t, err)
				t.Cleanup(func() { unix.Close(fd) })
				require.NoError(t, unix.Unmount(dir, unix.MNT_DETACH))
				_, err = os.Stat(filepath.Join("/sys/fs", tc.fstype, filepath.Base(node)))
				require.NoError(t, err, "the kernel shows the file system")
				require.NoError(t, os.MkdirAll(filepath.Join(sys, "fs", tc.fstype, "ublkb0"), 0o755))
			}

			rep, _ := heldByKernelState(t, d, sys, ownProcfs(t, d.Pid()))
			want := tc.want(dir)
			same := func(h ublk.Holder) bool { return h.Kind == want.Kind && h.Detail == want.Detail }
			assert.True(t, slices.ContainsFunc(rep.Device(0).Holders, same), "want %v in %v", want, rep.Device(0).Holders)
			require.NotNil(t, rep.LastResort)
			fates := 0
			for _, f := range rep.LastResort.Holders {
				if same(f.Holder) {
					fates++
					assert.False(t, f.Doomed || f.Killed, "%+v", f)
				}
			}
			assert.Equal(t, 1, fates, "%+v", rep.LastResort.Holders)
			assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
			assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the file system")
			assert.NotContains(t, events(t, log), "sigterm", "and was never asked to stop")
		})
	}
}

// A file system whose journal is on the disk, the file system on another
// device, holds the disk in the kernel from its mount until the kernel
// frees it; no sysfs holders/ lists it, it has no fs/TYPE directory, and
// mountinfo names only the file system's own device as its device. An
// ext4's external journal (mke2fs -J device=) shows in procfs's
// fs/jbd2/NAME; an xfs's external log (mkfs.xfs -l logdev=) among its
// mount's options, logdev=PATH. The step names each, kills nothing for it
// and never asks the daemon to stop under it (HeldError). Before, the scan
// found no holder and the daemon was asked to stop (the fake daemon
// stopped, exit 0, in 0.1 s): the journal's writes then fail, and the file
// system shuts down. The file systems and their journals are real; for
// ext4 the fake procfs the step reads shows the journal by the disk's name
// in the fake sysfs, a link to the kernel's entry.
func TestStepNamesAFileSystemsJournalOnTheDisk(t *testing.T) {
	for _, tc := range []struct {
		fstype string
		want   func(node, dir string) ublk.Holder
		spared string // why the last resort kills nothing for it
	}{
		{"ext4", func(string, string) ublk.Holder {
			return ublk.Holder{Kind: "filesystem", Detail: "jbd2 journal on ublkb0 (procfs fs/jbd2/ublkb0): an ext4 or ocfs2 file system's, on another device"}
		}, "kernel state"},
		{"xfs", func(node, dir string) ublk.Holder {
			return ublk.Holder{Kind: "mount", Detail: dir + " (its log: logdev=" + node + ")"}
		}, "held by mount: killing a process does not release it"},
	} {
		t.Run(tc.fstype, func(t *testing.T) {
			node, dev, dir := loopdev.MountedWithJournal(t, tc.fstype)
			d, sys, _, log := realDaemon(t, fakeublk.Cooperative, 0,
				fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor, Reads: 1})
			proc := ownProcfs(t, d.Pid())
			require.NoError(t, os.MkdirAll(filepath.Join(proc, "fs", "jbd2"), 0o755))
			require.NoError(t, os.Symlink(filepath.Join("/proc/fs/jbd2", filepath.Base(node)), filepath.Join(proc, "fs", "jbd2", "ublkb0")))

			rep, held := heldByKernelState(t, d, sys, proc)
			want := tc.want(node, dir)
			assert.Contains(t, held.Error(), want.Detail)
			same := func(h ublk.Holder) bool { return h.Kind == want.Kind && h.Detail == want.Detail }
			assert.True(t, slices.ContainsFunc(rep.Device(0).Holders, same), "want %v in %v", want, rep.Device(0).Holders)
			require.NotNil(t, rep.LastResort)
			fates := 0
			for _, f := range rep.LastResort.Holders {
				if same(f.Holder) {
					fates++
					assert.False(t, f.Doomed || f.Killed, "%+v", f)
					assert.Contains(t, f.Reason, tc.spared)
				}
			}
			assert.Equal(t, 1, fates, "%+v", rep.LastResort.Holders)
			assert.Equal(t, ublk.VerdictHeld, rep.Device(0).Verdict)
			assert.Equal(t, -1, d.ExitCode(), "the daemon keeps serving the journal")
			assert.NotContains(t, events(t, log), "sigterm", "and was never asked to stop")
		})
	}
}

// Two ublk servers on one node (a DaemonSet update that starts the new pod
// before the old one has ended, another product's ublk volumes): the step
// acts on its own daemon's devices alone. The other server's device, its
// char device held by a daemon outside this server's cgroup, is held by a
// VMM of that server to the end. Before, the step took it for its
// daemon's: it returned a HeldError and never asked its own daemon to
// stop, which the pod's SIGKILL would then kill with its devices live (the
// host-crash path); with the VMM gone, the control fallback would have
// stopped and deleted the other server's live device. Now it leaves that
// device alone and says why, and stops its own daemon; the other daemon is
// never asked, and its device stays live.
func TestStepLeavesAnotherServersDevicesAlone(t *testing.T) {
	node, dev := loopdev.Attach(t)
	sys, dir := t.TempDir(), t.TempDir()
	charMinor := uint32(os.Getpid()*2) % (1 << 20) // numbers no other test's daemon holds
	start := func(name string, spec fakeublk.DeviceSpec) *fakeublk.Child {
		return ublk.ServingDaemon(t, sys, dir, name, spec)
	}
	mine := start("mine", fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0, CharMajor: 4094, CharMinor: charMinor})
	other := start("other", fakeublk.DeviceSpec{ID: 1, Major: dev.Major, Minor: dev.Minor, CharMajor: 4094, CharMinor: charMinor + 1})
	outsiderCgroup(t, other.Pid())
	vmm, stdin := loopdev.Hold(t, node)
	outsiderCgroup(t, vmm.Process.Pid)

	td, err := ublk.New(findProcess(t, mine.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, mine.Pid(), other.Pid(), vmm.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 20*time.Second)
	t.Log(rep.String())
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	require.Len(t, rep.Devices, 1, "the daemon's device alone")
	assert.Equal(t, 0, rep.Devices[0].ID)
	assert.Contains(t, rep.Note, fmt.Sprintf("ublkb1: its /dev/ublkc1 is open in pid %d (", other.Pid()))
	assert.Contains(t, rep.Note, "another server's device, left alone")
	<-mine.Done()
	assert.Equal(t, 0, mine.ExitCode())
	assert.Contains(t, events(t, filepath.Join(dir, "mine")), "stop 0")
	assert.Equal(t, "start\n", events(t, filepath.Join(dir, "other")), "the other daemon was never asked")
	assert.True(t, (&fakeublk.Tree{Root: sys}).HasDisk(1), "its device stays live")

	stdin.Close() // the processes leave their cgroups before those are removed
	_ = vmm.Wait()
	other.Close()
	<-other.Done()
}

// A daemon the step knows by its functions alone (DaemonFuncs: no PID) may
// run in a container of its own beside the server, in the pod's cgroup
// but not the server's: its devices are the step's, and only a server
// outside the cgroup above the server's (another pod's) is another. Here
// the daemon is in a cgroup beside the test's, the other server's daemon
// in one at the hierarchy's root.
func TestStepWithoutTheDaemonsPIDKeepsTheDevicesOfADaemonBesideIt(t *testing.T) {
	sys, dir := t.TempDir(), t.TempDir()
	charMinor := uint32(os.Getpid()*2+1) % (1 << 20)
	start := func(name string, spec fakeublk.DeviceSpec) *fakeublk.Child {
		return ublk.ServingDaemon(t, sys, dir, name, spec)
	}
	mine := start("mine", fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0, CharMajor: 4093, CharMinor: charMinor})
	other := start("other", fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4093, CharMinor: charMinor + 1})
	outsiderCgroup(t, mine.Pid())
	farCgroup(t, other.Pid())
	daemon := ublk.DaemonFuncs{
		StopFunc: func(context.Context) error { return syscall.Kill(mine.Pid(), syscall.SIGTERM) },
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-mine.Done():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}

	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, mine.Pid(), other.Pid()), KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 20*time.Second)
	t.Log(rep.String())
	require.NoError(t, err)
	require.Len(t, rep.Devices, 1, "the daemon's device, and it alone")
	assert.Equal(t, 0, rep.Devices[0].ID)
	assert.Equal(t, ublk.VerdictStopped, rep.Devices[0].Verdict)
	assert.Contains(t, rep.Note, fmt.Sprintf("ublkb1: its /dev/ublkc1 is open in pid %d (", other.Pid()))
	assert.Contains(t, rep.Note, "outside the cgroup above the server's")
	assert.Equal(t, "start\n", events(t, filepath.Join(dir, "other")), "the other daemon was never asked")

	other.Close() // the processes leave their cgroups before those are removed
	<-other.Done()
}

// heldByKernelState runs the step over daemon d and the fake sysfs sys,
// scanning d's and this process's procfs entries, on a vulnerable kernel
// with a 1 s holder wait and no control fallback, and requires it to end
// held (a HeldError): what holds the disk is kernel state, which no kill
// releases.
func heldByKernelState(t *testing.T, d *fakeublk.Child, sys, proc string) (*ublk.Report, *ublk.HeldError) {
	t.Helper()
	td, err := ublk.New(findProcess(t, d.Pid()), ublkhook.With(ublk.Config{HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 10*time.Second)
	t.Log(rep.String())
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held)
	return rep, held
}

// A device another server adds while the step runs (a DaemonSet update's
// new pod, started before this one has ended) is left alone as one found
// at the start is: the step finds every device added since it began
// (its daemon's: a VM whose start raced the drain), and tells another
// server's by its /dev/ublkcN, open in a daemon outside the server's
// cgroup. Here this server's daemon is hung, on a fixed kernel, so the
// step waits until it kills it; the other server's device comes into
// sysfs meanwhile. Taken for the daemon's, it would have been waited for,
// and once the daemon was gone the control fallback would have stopped
// and deleted it under its server.
func TestStepLeavesAnotherServersDeviceAddedLateAlone(t *testing.T) {
	sys, dir := t.TempDir(), t.TempDir()
	charMinor := uint32(os.Getpid()*2) % (1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mine, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Mode: fakeublk.Hung, EventLog: filepath.Join(dir, "mine"),
		Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0, CharMajor: 4092, CharMinor: charMinor}}})
	if err != nil && os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device nodes: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(mine.Close)
	proc := ownProcfs(t, mine.Pid())
	asked := make(chan struct{})
	logger := slog.New(onMessage{"ublk: request stop", sync.OnceFunc(func() { close(asked) })})
	td, err := ublk.New(findProcess(t, mine.Pid()), ublkhook.With(ublk.Config{NoControl: true, Reserve: 2 * time.Second, Logger: logger},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: "6.14.8"}))
	require.NoError(t, err)
	type result struct {
		rep *ublk.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := run(t, td, 5*time.Second)
		done <- result{rep, err}
	}()
	<-asked // the step is past finding its devices

	// The other server, in a sysfs of its own until it is outside this
	// server's cgroup and in the procfs the step reads: then its device
	// comes into the step's sysfs.
	otherSys := t.TempDir()
	other := ublk.ServingDaemon(t, otherSys, dir, "other", fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4092, CharMinor: charMinor + 1})
	outsiderCgroup(t, other.Pid())
	require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", other.Pid()), filepath.Join(proc, strconv.Itoa(other.Pid()))))
	require.NoError(t, os.Symlink(filepath.Join(otherSys, "devices/virtual/ublk-char/ublkc1"), filepath.Join(sys, "class/ublk-char/ublkc1")))
	require.NoError(t, os.Symlink(filepath.Join(otherSys, "devices/virtual/block/ublkb1"), filepath.Join(sys, "block/ublkb1")))

	res := <-done
	t.Log(res.rep.String())
	var inc *ublk.IncompleteError
	require.ErrorAs(t, res.err, &inc, "the hung daemon killed on a fixed kernel")
	require.Len(t, res.rep.Devices, 1, "the daemon's device alone")
	assert.Equal(t, 0, res.rep.Devices[0].ID)
	assert.Contains(t, res.rep.Note, fmt.Sprintf("ublkb1: its /dev/ublkc1 is open in pid %d (", other.Pid()))
	assert.Equal(t, "start\n", events(t, filepath.Join(dir, "other")), "the other daemon was never asked")
	assert.True(t, (&fakeublk.Tree{Root: otherSys}).HasDisk(1), "its device stays live")

	other.Close() // the processes leave their cgroups before those are removed
	<-other.Done()
}

// onMessage is a slog.Handler that calls f for each record whose message
// is msg, and drops every record.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// A ublk server is never killed by the last resort, even when the step
// does not know its PID (DaemonFuncs, a Socket with no Process) or it is
// not the daemon's own process (a per-device server the daemon forked):
// the driver lets only a device's server open its /dev/ublkcN, so a
// holder with one of the step's devices' char devices open is that
// server, and killing it with the device live is the host-crash path. Its
// own holds, like the daemon's, keep no device from stopping: asking the
// daemon to stop releases them. Here the server holds its disk open, and
// its stderr, /dev/null, stands for its /dev/ublkc0 (the fake sysfs gives
// ublkc0 its number). Before, it was a doomed holder in the server's
// cgroup like a VMM, and SIGKILLed with its device live.
func TestLastResortNeverKillsAUblkServerItDoesNotKnowByPID(t *testing.T) {
	srv, stdin, sys := serverHoldingUblkb0(t, 0)
	p := findProcess(t, srv.Process.Pid)
	daemon := ublk.DaemonFuncs{ // no PID
		StopFunc: func(context.Context) error { return stdin.Close() },
		WaitFunc: p.Wait,
	}
	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, srv.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, _ := run(t, td, 20*time.Second)
	assertSpared(t, rep, srv.Process.Pid, "a ublk server: it has /dev/ublkc0 open")
	assert.True(t, rep.Daemon.Requested, "the daemon was asked to stop: its own holds keep no device from stopping")
	assertExitedByItself(t, srv)
}

// A ublk server of a device that is not the step's (Config.Devices leaves
// it out: a second server in the pod, a device stacked on the step's disk
// whose server uses the disk as its backing store) holds the step's disk,
// in the server's cgroup. It is a ublk server all the same: the driver
// lets only a device's server open its /dev/ublkcN, and killing it with
// that device live is the host-crash path. The last resort spares it and
// says why; not the daemon's, its holds stand, and the step returns a
// HeldError with the daemon never asked to stop. Here its stderr,
// /dev/null, stands for /dev/ublkc1 (the fake sysfs gives ublkc1 its
// number). Before, the look for servers read the step's devices' char
// devices alone, and the process was SIGKILLed as a doomed VMM.
func TestLastResortNeverKillsAUblkServerOfADeviceNotTheSteps(t *testing.T) {
	srv, stdin, sys := serverHoldingUblkb0(t, 1)
	var asked atomic.Bool
	daemon := ublk.DaemonFuncs{StopFunc: func(context.Context) error { asked.Store(true); return nil }} // no PID
	td, err := ublk.New(daemon, ublkhook.With(ublk.Config{Devices: []int{0}, HolderWait: time.Second, NoControl: true},
		ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: ownProcfs(t, srv.Process.Pid), KernelRelease: vulnerable}))
	require.NoError(t, err)
	rep, err := run(t, td, 20*time.Second)
	assertSpared(t, rep, srv.Process.Pid, "a ublk server of a device that is not the step's: it has /dev/ublkc1 open")
	var held *ublk.HeldError
	require.ErrorAs(t, err, &held, "its hold stands")
	assert.False(t, asked.Load(), "the daemon is not asked to stop under it")
	require.NoError(t, stdin.Close())
	assertExitedByItself(t, srv)
}

// serverHoldingUblkb0 starts a process that holds a loop device open, and
// makes a fake sysfs whose ublkb0 is that loop device and in which the
// process's stderr, /dev/null, is device charID's /dev/ublkcN (ublkb0's
// own when charID is 0; otherwise that of a device the fake sysfs adds).
// It returns the process, its stdin (closed, it exits) and the sysfs.
func serverHoldingUblkb0(t *testing.T, charID int) (*exec.Cmd, io.WriteCloser, string) {
	t.Helper()
	node, dev := loopdev.Attach(t)
	srv, stdin := loopdev.Hold(t, node)
	var null unix.Stat_t
	require.NoError(t, unix.Stat(os.DevNull, &null))
	sys := t.TempDir()
	tree, err := fakeublk.NewTree(sys)
	require.NoError(t, err)
	disk := fakeublk.DeviceSpec{ID: 0, Major: dev.Major, Minor: dev.Minor}
	char := fakeublk.DeviceSpec{ID: charID, Major: 4000, Minor: uint32(charID), CharMajor: unix.Major(null.Rdev), CharMinor: unix.Minor(null.Rdev)}
	if charID == 0 {
		disk.CharMajor, disk.CharMinor = char.CharMajor, char.CharMinor
	}
	require.NoError(t, tree.AddDevice(disk))
	if charID != 0 {
		require.NoError(t, tree.AddDevice(char))
	}
	return srv, stdin, sys
}

// assertSpared asserts that the last resort ran and left the process pid
// alive, for reason.
func assertSpared(t *testing.T, rep *ublk.Report, pid int, reason string) {
	t.Helper()
	t.Log(rep.String())
	require.NotNil(t, rep.LastResort, "the last resort ran: the server held a disk")
	f := fateOf(rep, pid)
	require.NotNil(t, f, "the server is named: %+v", rep.LastResort.Holders)
	assert.False(t, f.Signalled || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, reason)
}

// assertExitedByItself waits for srv and asserts no signal ended it.
func assertExitedByItself(t *testing.T, srv *exec.Cmd) {
	t.Helper()
	_ = srv.Wait()
	ws := srv.ProcessState.Sys().(syscall.WaitStatus)
	assert.False(t, ws.Signaled(), "the server exited by itself: %v", ws)
}
