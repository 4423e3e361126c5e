//go:build linux

package ublkguest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
	"github.com/drainkit/drainkit/ublk"
)

// guestCgroups mounts cgroup2 in the guest and makes two cgroups: "server",
// which this test process (the server running the step) moves into so the
// processes it starts are inside it, as a pod's are; and "other", standing
// for another pod. It returns a function that moves a process into other.
func guestCgroups(t *testing.T) func(pid int) {
	t.Helper()
	root := "/sys/fs/cgroup"
	require.NoError(t, os.MkdirAll(root, 0o755))
	if err := unix.Mount("cgroup2", root, "cgroup2", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		t.Fatalf("mount cgroup2: %v", err)
	}
	for _, d := range []string{"server", "other"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	move := func(dir string, pid int) {
		require.NoError(t, os.WriteFile(filepath.Join(root, dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644))
	}
	move("server", os.Getpid())
	t.Cleanup(func() { move("", os.Getpid()) })
	return func(pid int) { move("other", pid) }
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

// lastResortBudget is the step's window: it ends at the simulated SIGKILL
// of the pod. With the default reserve (10 s) the last-resort point is 2 s
// in.
const lastResortBudget = 12 * time.Second

// TestGuestStepLastResortKillsDoomedHolderStopsAndDaemonExits: a VMM in
// the server's own cgroup never closes the disk while a writer (this
// process, the server) has I/O in flight. The teardown step, on this
// vulnerable kernel and with its defaults, kills the VMM at the
// last-resort point (doomed by the pod's SIGKILL anyway), stops the device
// with STOP_DEV while the daemon still serves it, and asks the daemon to
// stop; the daemon exits by itself well before the simulated SIGKILL. No
// BUG/WARN, no accepted write aborted, acknowledged writes intact.
func TestGuestStepLastResortKillsDoomedHolderStopsAndDaemonExits(t *testing.T) {
	vmtest.GuestOnly(t)
	guestCgroups(t)
	r := newRig(t, ublkserver.DaemonConfig{Config: ublkserver.Config{IODelay: 2 * time.Millisecond}})
	id := r.daemon.Devices[0]
	w := startWriter(t, r.disk(id), 5)
	vmm, err := StartHolder(r.ctx(20*time.Second), r.disk(id))
	require.NoError(t, err)
	t.Cleanup(vmm.Kill)

	td := r.step(ublk.Config{})
	require.True(t, td.LastResort(), "on by default")
	sigkill := time.Now().Add(lastResortBudget) // the simulated SIGKILL of the pod
	ctx, cancel := context.WithDeadline(t.Context(), sigkill)
	defer cancel()
	rep, err := td.Stop(ctx)
	t.Log(rep.String())
	require.NoError(t, err)

	require.NotNil(t, rep.LastResort, "the last resort ran")
	t.Logf("last resort at +%v: server %s, holders %+v", rep.LastResort.At.Sub(rep.Start), rep.LastResort.ServerCgroup, rep.LastResort.Holders)
	// The last-resort point is SIGKILL minus the step's reserve; the last
	// resort runs inside its own part of it (3 of the 10 s).
	reserve := td.Phase().Reserve() // the default, 10 s
	point := sigkill.Add(-reserve)
	assert.False(t, rep.LastResort.At.Before(point), "not before the last-resort point: %v early", point.Sub(rep.LastResort.At))
	assert.True(t, rep.LastResort.At.Before(point.Add(reserve*3/10)), "inside the last resort's window: %v late",
		rep.LastResort.At.Sub(point))
	f := fateOf(rep, vmm.Cmd.Process.Pid)
	require.NotNil(t, f, "the VMM is in the report")
	assert.True(t, f.Doomed && f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "in the server's cgroup")
	own := fateOf(rep, os.Getpid())
	require.NotNil(t, own, "the writer (this process) is reported")
	assert.False(t, own.Killed)
	_ = vmm.Cmd.Wait()
	assert.Equal(t, "signal: killed", vmm.Cmd.ProcessState.String())

	stop := stepNamed(rep, id, "STOP_DEV")
	require.NotNil(t, stop, "STOP_DEV by the last resort")
	assert.False(t, stop.Start.Before(rep.LastResort.At))
	req := rep.Step("request stop")
	require.NotNil(t, req, "the daemon was asked to stop")
	assert.False(t, req.Start.Before(stop.Start.Add(stop.Duration)), "asked only after STOP_DEV returned")
	assert.True(t, rep.Daemon.Exited && !rep.Daemon.Killed, "%+v", rep.Daemon)
	assert.True(t, rep.Start.Add(rep.Duration).Before(sigkill), "the daemon exited by itself %v before SIGKILL",
		sigkill.Sub(rep.Start.Add(rep.Duration)))
	if stop.Result == "done" { // STOP_DEV completed while the daemon served
		assert.Equal(t, ublk.VerdictStoppedByControl, rep.Verdict)
	} else {
		// The last resort has its part of the reserve (3 s) for the scans,
		// the holder's death and STOP_DEV; emulated (TCG) on a loaded host
		// the first two took 1.5 s and 2.2 s once, and STOP_DEV was cut at
		// the part's end. Only that may cut it; the daemon, asked next (the
		// disk no longer held), stops the device itself: still the safe
		// order.
		// Cut, it is sent and runs on in the kernel: pending, not failed.
		assert.Empty(t, stop.Err, "a STOP_DEV cut by its window is not a failure")
		assert.Contains(t, stop.Result, context.DeadlineExceeded.Error(), "only the end of the last resort's part cuts STOP_DEV")
		assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
		t.Logf("STOP_DEV cut at the end of the last resort's part (%s); the daemon stopped the device", stop.Result)
	}

	<-w.Done()
	writes, err := w.Stop(r.ctx(10 * time.Second))
	require.NoError(t, err)
	o := r.observe(writes)
	assert.NoError(t, o.DaemonErr, "the daemon exited by itself with status 0")
	CheckDevicesGone(t, r.ctl, r.daemon.Devices)
	var acked int
	for _, wr := range writes {
		if wr.Err == nil {
			acked++
		} else if !Refused(wr, stop.Start, o.Disk) {
			assert.False(t, wr.Start.Before(stop.Start), "a write issued %v before STOP_DEV failed: in-flight I/O aborted: %v",
				stop.Start.Sub(wr.Start), wr.Err)
		}
	}
	assert.Positive(t, acked)
	assert.Empty(t, VerifyAcked(o.Disk, writes), "acknowledged writes intact")
	t.Logf("%d writes acknowledged of %d; last resort %v after its point (+%v), STOP_DEV took %v, step done %v before SIGKILL",
		acked, len(writes), rep.LastResort.At.Sub(point), point.Sub(rep.Start), stop.Duration, sigkill.Sub(rep.Start.Add(rep.Duration)))
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestStepLastResortSparesHolderInAnotherCgroup: a holder in another
// cgroup (another pod, the host) is never killed: the step reports it with
// its cgroup. Its disk has no UBLK_F_USER_RECOVERY and its daemon is in
// the server's cgroup: the pod's SIGKILL would kill the daemon with the
// disk live (the host-crash path on this kernel), and the kernel would
// stop the disk then under the same holder. So the last resort stops it
// now with STOP_DEV while the daemon serves it, the daemon is asked to
// stop and exits with no live device, and Stop returns a
// *StoppedHeldError naming the holder that lost its disk.
func TestGuestStepLastResortSparesHolderInAnotherCgroup(t *testing.T) {
	vmtest.GuestOnly(t)
	toOther := guestCgroups(t)
	r := newRig(t, ublkserver.DaemonConfig{})
	id := r.daemon.Devices[0]
	outsider, err := StartHolder(r.ctx(20*time.Second), r.disk(id))
	require.NoError(t, err)
	t.Cleanup(outsider.Kill)
	toOther(outsider.Cmd.Process.Pid)

	sigkill := time.Now().Add(lastResortBudget)
	ctx, cancel := context.WithDeadline(t.Context(), sigkill)
	defer cancel()
	rep, err := r.step(ublk.Config{}).Stop(ctx)
	t.Log(rep.String())
	var stopped *ublk.StoppedHeldError
	require.ErrorAs(t, err, &stopped)
	var held *ublk.HeldError
	assert.False(t, errors.As(err, &held), "no device left held: %v", err)
	require.Len(t, stopped.Holders[id], 1, "%v", err)
	assert.Equal(t, outsider.Cmd.Process.Pid, stopped.Holders[id][0].PID)
	require.NotNil(t, rep.LastResort, "the last resort ran")
	t.Logf("last resort: server %s, holders %+v", rep.LastResort.ServerCgroup, rep.LastResort.Holders)
	f := fateOf(rep, outsider.Cmd.Process.Pid)
	require.NotNil(t, f)
	assert.False(t, f.Doomed || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "outside the server's cgroup")
	assert.Contains(t, f.Cgroup, "/other")
	assert.Contains(t, rep.LastResort.ServerCgroup, "/server")
	require.NoError(t, outsider.Cmd.Process.Signal(unix.Signal(0)), "the outsider is alive")

	under := stepNamed(rep, id, "stop under holders")
	require.NotNil(t, under, "stopped under its holder")
	assert.Contains(t, under.Result, "the daemon is in the server's cgroup")
	stop := stepNamed(rep, id, "STOP_DEV")
	require.NotNil(t, stop)
	assert.Empty(t, stop.Err)
	assert.False(t, stop.Start.Before(rep.LastResort.At))
	req := rep.Step("request stop")
	require.NotNil(t, req, "the daemon was asked to stop")
	assert.False(t, req.Start.Before(stop.Start), "asked only after STOP_DEV")
	// The daemon's DEL_DEV waits for the disk's last opener, the outsider:
	// it is killed once ExitWait is over, which is safe with no live
	// device (STOP_DEV completed), still before SIGKILL.
	assert.True(t, rep.Daemon.Exited, "%+v", rep.Daemon)
	if rep.Daemon.Killed {
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill)
		assert.Contains(t, kill.Result, "no live device left")
		assert.False(t, kill.Start.Before(stop.Start.Add(stop.Duration)), "killed only after STOP_DEV completed")
	}
	assert.True(t, rep.Start.Add(rep.Duration).Before(sigkill), "done before SIGKILL")
	assert.NotEqual(t, ublkserver.StateLive, r.state(id), "the disk is stopped")
	outsider.Kill() // its last close frees the device the daemon deleted
	r.devicesGone()
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestStepLeavesAnotherServersDeviceAlone: two ublk servers on one
// node, the other one in another cgroup (another pod). The step, with its
// defaults, finds both servers' devices in sysfs and tells them apart by
// who has each /dev/ublkcN open: it stops its own daemon's devices and its
// daemon, never touches the other server's device (live, its daemon
// serving it), and names it in the Report's note.
func TestGuestStepLeavesAnotherServersDeviceAlone(t *testing.T) {
	vmtest.GuestOnly(t)
	toOther := guestCgroups(t)
	other := newRig(t, ublkserver.DaemonConfig{})
	toOther(other.daemon.Pid())
	r := newRig(t, ublkserver.DaemonConfig{})
	theirs := other.daemon.Devices[0]

	rep, err := r.step(ublk.Config{}).Stop(r.ctx(30 * time.Second))
	t.Log(rep.String())
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	require.Len(t, rep.Devices, len(r.daemon.Devices), "the daemon's devices alone")
	assert.Nil(t, rep.Device(theirs))
	assert.Contains(t, rep.Note, fmt.Sprintf("ublkb%d: its /dev/ublkc%d is open in pid %d", theirs, theirs, other.daemon.Pid()))
	assert.NoError(t, r.daemon.Wait(r.ctx(10*time.Second)), "the daemon exited with status 0")
	r.devicesGone()
	assert.True(t, other.alive(), "the other server's daemon was not touched")
	assert.Equal(t, ublkserver.StateLive, other.state(theirs))
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestStepLeavesTheDeviceOfAServerProcfsDoesNotShow: two ublk servers
// on one node, the other one in a PID namespace of its own that the
// step's procfs does not show (another pod's: the DaemonSets run with
// hostPID false), here a procfs of links to this process and its daemon
// alone. The other server's device is live, its /dev/ublkcN open in no
// process the step sees; the step's daemon, whose fds it reads, does not
// have it open either: another server's, left alone. Before, it was the
// step's, and once the daemon had stopped its own and exited, the control
// fallback ran STOP_DEV and DEL_DEV on it under its server (docs/faults.md
// row 681).
func TestGuestStepLeavesTheDeviceOfAServerProcfsDoesNotShow(t *testing.T) {
	vmtest.GuestOnly(t)
	other := newRig(t, ublkserver.DaemonConfig{})
	r := newRig(t, ublkserver.DaemonConfig{})
	theirs := other.daemon.Devices[0]
	proc := t.TempDir()
	for _, pid := range []int{os.Getpid(), r.daemon.Pid()} {
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(proc, strconv.Itoa(pid))))
	}
	require.NoError(t, os.Symlink(strconv.Itoa(os.Getpid()), filepath.Join(proc, "self")))

	rep, err := r.step(ublkhook.With(ublk.Config{}, ublkhook.Hooks{ProcfsRoot: proc})).Stop(r.ctx(30 * time.Second))
	t.Log(rep.String())
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Verdict)
	require.Len(t, rep.Devices, len(r.daemon.Devices), "the daemon's devices alone")
	assert.Nil(t, rep.Device(theirs))
	assert.Contains(t, rep.Note, fmt.Sprintf("ublkb%d: live, its /dev/ublkc%d open in no process procfs shows: not in the daemon (pid %d, its fds read)",
		theirs, theirs, r.daemon.Pid()))
	assert.NoError(t, r.daemon.Wait(r.ctx(10*time.Second)), "the daemon exited with status 0")
	r.devicesGone()
	assert.True(t, other.alive(), "the other server's daemon was not touched")
	assert.Equal(t, ublkserver.StateLive, other.state(theirs))
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestStepLastResortStopsAHeldRecoveryDeviceOnThisKernel: as in
// TestGuestStepLastResortSparesHolderInAnotherCgroup, a holder in another
// cgroup keeps the disk open past the last-resort point, but the device
// was added with UBLK_F_USER_RECOVERY, for the next server to recover.
// Its daemon is in the server's cgroup, so the pod's SIGKILL kills it: on
// this kernel (6.12, no ublk cancel fix) the daemon's death with the
// device live runs the cancel path whatever the flag (the kernel then
// quiesces the device instead of stopping it, after the same
// ublk_cancel_cmd), the host-crash race. A kernel that could keep it
// safely is fixed, and there the last resort does not run. So the last
// resort stops it with STOP_DEV while the daemon serves it, as a device
// without the flag, the daemon exits with no live device before SIGKILL,
// and the step says the recovery was given up and why. Before, it was
// kept live "for the next server", the daemon never asked to stop and
// left for SIGKILL.
func TestGuestStepLastResortStopsAHeldRecoveryDeviceOnThisKernel(t *testing.T) {
	vmtest.GuestOnly(t)
	toOther := guestCgroups(t)
	r := newRig(t, ublkserver.DaemonConfig{Config: ublkserver.Config{Recovery: true}})
	id := r.daemon.Devices[0]
	outsider, err := StartHolder(r.ctx(20*time.Second), r.disk(id))
	require.NoError(t, err)
	t.Cleanup(outsider.Kill)
	toOther(outsider.Cmd.Process.Pid)

	sigkill := time.Now().Add(lastResortBudget)
	ctx, cancel := context.WithDeadline(t.Context(), sigkill)
	defer cancel()
	rep, err := r.step(ublk.Config{}).Stop(ctx)
	t.Log(rep.String())
	require.NotNil(t, rep.Device(id).Info, "the driver's view read")
	assert.NotZero(t, rep.Device(id).Info.Flags&(1<<3), "the device has UBLK_F_USER_RECOVERY")
	var stopped *ublk.StoppedHeldError
	require.ErrorAs(t, err, &stopped, "the recovery device stopped under its holder, not kept live for SIGKILL")
	require.Len(t, stopped.Holders[id], 1, "%v", err)
	assert.Equal(t, outsider.Cmd.Process.Pid, stopped.Holders[id][0].PID)

	under := stepNamed(rep, id, "stop under holders")
	require.NotNil(t, under, "stopped under its holder")
	assert.Contains(t, under.Result, "UBLK_F_USER_RECOVERY given up")
	stop := stepNamed(rep, id, "STOP_DEV")
	require.NotNil(t, stop)
	assert.Empty(t, stop.Err)
	assert.False(t, stop.Start.Before(rep.LastResort.At))
	req := rep.Step("request stop")
	require.NotNil(t, req, "the daemon was asked to stop")
	assert.False(t, req.Start.Before(stop.Start), "asked only after STOP_DEV")
	assert.True(t, rep.Daemon.Exited, "the daemon gone before SIGKILL: %+v", rep.Daemon)
	if rep.Daemon.Killed {
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill)
		assert.Contains(t, kill.Result, "no live device left")
	}
	assert.True(t, rep.Start.Add(rep.Duration).Before(sigkill), "done before SIGKILL")
	assert.NotEqual(t, ublkserver.StateLive, r.state(id), "the disk is stopped")
	outsider.Kill()
	r.devicesGone()
	noKernelProblemsSince(t, r.logFrom)
}
