//go:build linux

package ublkguest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

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

// heldNow scans the holders of device id's disk, and returns them with
// the disk's number.
func (r *rig) heldNow(id int) (map[int]ublk.DevNum, map[int][]ublk.Holder) {
	r.t.Helper()
	d, err := ublk.ReadDevice("/sys", id)
	require.NoError(r.t, err)
	hs, err := ublk.Holders(r.ctx(10*time.Second), "/proc", d.Dev)
	require.NoError(r.t, err)
	return map[int]ublk.DevNum{id: d.Dev}, map[int][]ublk.Holder{id: hs}
}

func fateOf(rep *ublk.LastResortReport, pid int) *ublk.HolderFate {
	for i := range rep.Holders {
		if rep.Holders[i].Holder.PID == pid {
			return &rep.Holders[i]
		}
	}
	return nil
}

// TestGuestLastResortKillsDoomedHolderStopsAndDaemonExits: a VMM in the
// server's own cgroup never closes the disk while a writer has I/O in
// flight. At the last-resort point the VMM is killed (doomed by the pod's
// SIGKILL anyway), STOP_DEV completes through /dev/ublk-control with the
// daemon still serving, and the daemon, asked to stop, exits by itself
// well before the simulated SIGKILL. No BUG/WARN, acknowledged writes
// intact.
func TestGuestLastResortKillsDoomedHolderStopsAndDaemonExits(t *testing.T) {
	vmtest.GuestOnly(t)
	guestCgroups(t)
	r := newRig(t, ublkserver.DaemonConfig{Config: ublkserver.Config{IODelay: 2 * time.Millisecond}})
	id := r.daemon.Devices[0]
	sigkill := time.Now().Add(10 * time.Second) // the simulated SIGKILL of the pod
	w := startWriter(t, r.disk(id), 5)
	vmm, err := StartHolder(r.ctx(20*time.Second), r.disk(id))
	require.NoError(t, err)
	t.Cleanup(vmm.Kill)

	disks, held := r.heldNow(id)
	rep := ublk.KillDoomedHolders(r.ctx(5*time.Second), "/proc", disks, held)
	t.Logf("last resort: server %s, holders %+v", rep.ServerCgroup, rep.Holders)
	f := fateOf(rep, vmm.Cmd.Process.Pid)
	require.NotNil(t, f, "the VMM is in the report")
	assert.True(t, f.Doomed && f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "in the server's cgroup")
	own := fateOf(rep, os.Getpid())
	require.NotNil(t, own, "the writer (this process) is reported")
	assert.False(t, own.Killed)
	_ = vmm.Cmd.Wait()
	assert.Equal(t, "signal: killed", vmm.Cmd.ProcessState.String())

	ctl, err := ublk.OpenControl(ublk.DefaultControlPath)
	require.NoError(t, err)
	defer ctl.Close()
	stopAt := time.Now()
	require.NoError(t, ctl.StopDev(r.ctx(5*time.Second), id), "STOP_DEV completes while the daemon serves")
	require.NoError(t, r.daemon.Cmd.Process.Signal(unix.SIGTERM))
	<-w.Done()
	writes, err := w.Stop(r.ctx(10 * time.Second))
	require.NoError(t, err)
	select {
	case <-r.daemon.Exited():
	case <-time.After(time.Until(sigkill)):
		t.Fatal("the daemon had not exited by the simulated SIGKILL")
	}
	assert.True(t, time.Now().Before(sigkill), "the daemon exited by itself before SIGKILL")
	o := r.observe(writes)
	assert.NoError(t, o.DaemonErr, "the daemon exited by itself with status 0")
	CheckDevicesGone(t, r.ctl, r.daemon.Devices)
	var acked int
	for _, wr := range writes {
		if wr.Err == nil {
			acked++
		} else {
			assert.False(t, wr.Start.Before(stopAt), "a write issued %v before STOP_DEV failed: in-flight I/O aborted: %v",
				stopAt.Sub(wr.Start), wr.Err)
		}
	}
	assert.Positive(t, acked)
	assert.Empty(t, VerifyAcked(o.Disk, writes), "acknowledged writes intact")
	t.Logf("%d writes acknowledged of %d; STOP_DEV at +%v", acked, len(writes), stopAt.Sub(writes[0].Start))
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestLastResortSparesHolderInAnotherCgroup: a holder in another
// cgroup (another pod, the host) is never killed: it is reported with its
// cgroup, and nothing else is done to its device.
func TestGuestLastResortSparesHolderInAnotherCgroup(t *testing.T) {
	vmtest.GuestOnly(t)
	toOther := guestCgroups(t)
	r := newRig(t, ublkserver.DaemonConfig{})
	id := r.daemon.Devices[0]
	outsider, err := StartHolder(r.ctx(20*time.Second), r.disk(id))
	require.NoError(t, err)
	t.Cleanup(outsider.Kill)
	toOther(outsider.Cmd.Process.Pid)

	disks, held := r.heldNow(id)
	rep := ublk.KillDoomedHolders(r.ctx(5*time.Second), "/proc", disks, held)
	t.Logf("last resort: server %s, holders %+v", rep.ServerCgroup, rep.Holders)
	f := fateOf(rep, outsider.Cmd.Process.Pid)
	require.NotNil(t, f)
	assert.False(t, f.Doomed || f.Killed, "%+v", f)
	assert.Contains(t, f.Reason, "outside the server's cgroup")
	assert.Contains(t, f.Cgroup, "/other")
	assert.Contains(t, rep.ServerCgroup, "/server")
	require.NoError(t, outsider.Cmd.Process.Signal(unix.Signal(0)), "the outsider is alive")
	assert.Equal(t, ublkserver.StateLive, r.state(id))
	noKernelProblemsSince(t, r.logFrom)
}
