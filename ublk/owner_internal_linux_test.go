//go:build linux

package ublk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bounds of a server's devices are cgroup paths as /proc/PID/cgroup
// shows them, from the root of the reader's cgroup namespace: a
// container on a cgroup v2 node reads its own as "/", its pod's other
// containers as "/../ctr", another pod's as "/../../pod/ctr".
func TestCgroupBoundsReadPathsAboveTheNamespacesRoot(t *testing.T) {
	for _, tc := range []struct {
		hp, p string
		in    bool
	}{
		{"/kubepods/pod1/ctr", "/kubepods/pod1/ctr", true},
		{"/kubepods/pod1/ctr/sub", "/kubepods/pod1/ctr", true},
		{"/kubepods/pod1/ctr2", "/kubepods/pod1/ctr", false},
		{"/kubepods/pod1/ctrx", "/kubepods/pod1/ctr", false}, // a name, not a prefix
		{"/kubepods/pod1/ctr2", "/kubepods/pod1", true},
		{"/anything", "/", true},
		{"/", "/", true},
		{"/../ctr2", "/", false}, // a neighbour, outside the namespace
		{"/../ctr2", "/..", true},
		{"/", "/..", true},
		{"/sub", "/..", true},
		{"/../../pod2/ctr", "/..", false},
		{"/../../pod2/ctr", "/../..", true},
		{"/../ctr2", "/../ctr", false},
		{"/../ctr/sub", "/../ctr", true},
	} {
		assert.Equal(t, tc.in, within(tc.hp, tc.p), "%s within %s", tc.hp, tc.p)
	}
	assert.Equal(t, cgroups{"0:": "/..", "4:memory": "/kubepods/pod1"},
		cgroups{"0:": "/", "4:memory": "/kubepods/pod1/ctr"}.parent())
	assert.Equal(t, cgroups{"0:": "/../.."}, cgroups{"0:": "/.."}.parent())
}

// A daemon that forks a process for each device (as ublksrv does) is its
// descendants too: they hold the devices' char devices.
func TestDescendsFollowsTheParentsProcfsNames(t *testing.T) {
	proc := t.TempDir()
	for pid, ppid := range map[int]int{10: 1, 11: 10, 12: 11, 20: 1} {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		stat := fmt.Sprintf("%d (ublk srv) S %d 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n", pid, ppid)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
	}
	ctx := t.Context()
	assert.True(t, descends(ctx, proc, 10, 10), "the daemon itself")
	assert.True(t, descends(ctx, proc, 12, 10), "its grandchild")
	assert.False(t, descends(ctx, proc, 20, 10), "another process")
	assert.False(t, descends(ctx, proc, 12, 0), "no daemon known")
	assert.False(t, descends(ctx, proc, 13, 10), "a process not in procfs")
}

// A live device whose /dev/ublkcN no process procfs shows has open is
// served by a process the step cannot see (another pod's ublk server,
// in a PID namespace of its own: the DaemonSets run with hostPID false)
// or cannot read (another user's, to a server without CAP_SYS_PTRACE).
// With the daemon's PID known and its fds read, it is not the daemon's:
// another server's, left alone, unless a process that may be the
// daemon's (inside the server's cgroup, or whose cgroup is not read)
// could not be read. Wherever the step cannot tell, the device stays its
// own, as before. Before, every such device was the step's.
func TestOthersDevicesTellsADeviceNoProcessHereServes(t *testing.T) {
	const daemon = 50
	for name, tc := range map[string]struct {
		daemon  int
		setup   func(t *testing.T, proc string, tree *fakeublk.Tree)
		another bool
	}{
		"served where procfs does not show": {daemon, nil, true},
		"served by a process outside whose fds are not read": {daemon, func(t *testing.T, proc string, _ *fakeublk.Tree) {
			unreadable(t, proc, "60", "0::/kubepods/podB/ctr\n")
		}, true},
		"the daemon's PID not known": {0, nil, false},
		"the daemon's fds not read": {daemon, func(t *testing.T, proc string, _ *fakeublk.Tree) {
			unreadable(t, proc, strconv.Itoa(daemon), "0::/kubepods/podA/ctr\n")
		}, false},
		"the daemon not in procfs": {daemon, func(t *testing.T, proc string, _ *fakeublk.Tree) {
			require.NoError(t, os.RemoveAll(filepath.Join(proc, strconv.Itoa(daemon))))
		}, false},
		"a process inside whose fds are not read": {daemon, func(t *testing.T, proc string, _ *fakeublk.Tree) {
			unreadable(t, proc, "61", "0::/kubepods/podA/ctr/sub\n")
		}, false},
		"a process whose fds and cgroup are not read": {daemon, func(t *testing.T, proc string, _ *fakeublk.Tree) {
			unreadable(t, proc, "62", "")
		}, false},
		"no disk: stopped, or not started yet": {daemon, func(t *testing.T, _ string, tree *fakeublk.Tree) {
			require.NoError(t, tree.StopDevice(1))
		}, false},
	} {
		t.Run(name, func(t *testing.T) {
			tree, err := fakeublk.NewTree(t.TempDir())
			require.NoError(t, err)
			require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4089, CharMinor: 1}))
			proc := t.TempDir()
			for pid, cg := range map[string]string{"self": "0::/kubepods/podA/ctr\n", strconv.Itoa(daemon): "0::/kubepods/podA/ctr\n"} {
				require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(cg), 0o644))
			}
			if tc.setup != nil {
				tc.setup(t, proc, tree)
			}
			devs, err := scanDevices(sysfs{root: tree.Root})
			require.NoError(t, err)
			others, untold := othersDevices(t.Context(), tree.Root, proc, devs, tc.daemon, nil, nil)
			assert.Empty(t, untold, "a pass not cut short tells every device")
			if !tc.another {
				assert.Empty(t, others, "the step's: it cannot tell")
				return
			}
			require.Contains(t, others, 1)
			assert.Contains(t, others[1], "live, its /dev/ublkc1 open in no process procfs shows: not in the daemon (pid 50, its fds read)")
			assert.Contains(t, others[1], "another server's device, left alone")
		})
	}
}

// unreadable makes process pid of a fake procfs one whose fds cannot be
// read (its fd entry not a directory, as EACCES or EMFILE make it), in
// cgroup (none: its cgroup not read either).
func unreadable(t *testing.T, proc, pid, cgroup string) {
	t.Helper()
	dir := filepath.Join(proc, pid)
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fd"), nil, 0o644))
	if cgroup != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644))
	}
}

// Two ublk servers on one node, as a DaemonSet update with the new pod
// started before the old one has ended makes them: the other server runs
// in a PID namespace of its own (the DaemonSets run with hostPID false),
// so procfs does not show it, and its device is live. The step, on a
// vulnerable kernel with the control fallback, knows its daemon's PID:
// its daemon does not have /dev/ublkc1 open, so ublkb1 is another
// server's, left alone; the daemon stops its own and exits, and the other
// server's device stays live. Before, ublkb1 was the step's (no holder
// seen), and once the daemon had exited the fallback ran STOP_DEV and
// DEL_DEV on it under its server: another pod's disk gone.
func TestStepLeavesTheLiveDeviceOfAServerProcfsDoesNotShow(t *testing.T) {
	sys, dir := t.TempDir(), t.TempDir()
	minor := uint32(os.Getpid()*2+3) % (1 << 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mine := ServingDaemon(t, sys, dir, "mine", fakeublk.DeviceSpec{ID: 0, Major: 4000, Minor: 0, CharMajor: 4088, CharMinor: minor})
	other := ServingDaemon(t, sys, dir, "other", fakeublk.DeviceSpec{ID: 1, Major: 4000, Minor: 1, CharMajor: 4088, CharMinor: minor + 1})
	daemon, err := FindProcess(mine.Pid())
	require.NoError(t, err)
	defer daemon.Close()
	proc := t.TempDir() // this process and its daemon: not the other server
	for _, pid := range []int{os.Getpid(), mine.Pid()} {
		require.NoError(t, os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(proc, strconv.Itoa(pid))))
	}
	require.NoError(t, os.Symlink(strconv.Itoa(os.Getpid()), filepath.Join(proc, "self")))
	tree := &fakeublk.Tree{Root: sys}
	ctl := &memControl{tree: tree, d: newMemDaemon(tree)}
	td, err := New(daemon, Config{Reserve: 2 * time.Second,
		hooks: ublkhook.Hooks{SysfsRoot: sys, ProcfsRoot: proc, KernelRelease: vulnerable,
			OpenControl: func(context.Context) (ublkctl.Controller, error) { return ctl, nil }}})
	require.NoError(t, err)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	rep, err := td.Stop(sctx)
	t.Log(rep.String())
	require.NoError(t, err)
	assert.NotContains(t, ctl.d.Events(), "STOP_DEV 1", "the other server's device was stopped")
	assert.NotContains(t, ctl.d.Events(), "DEL_DEV 1", "the other server's device was deleted")
	require.Len(t, rep.Devices, 1, "the daemon's device alone")
	assert.Equal(t, VerdictStopped, rep.Devices[0].Verdict)
	assert.Contains(t, rep.Note, fmt.Sprintf("ublkb1: live, its /dev/ublkc1 open in no process procfs shows: not in the daemon (pid %d, its fds read)", mine.Pid()))
	<-mine.Done()
	assert.Equal(t, 0, mine.ExitCode())
	assert.True(t, tree.HasDisk(1), "the other server's device stays live")
	data, err := os.ReadFile(filepath.Join(dir, "other"))
	require.NoError(t, err)
	assert.Equal(t, "start\n", string(data), "the other daemon was never asked")
	select {
	case <-other.Done():
		t.Fatal("the other server exited")
	default:
	}
}

// ServingDaemon starts a fake daemon serving spec on the fake sysfs sys,
// its events logged to dir/name, holding the device's char device node
// open as a real server holds /dev/ublkcN (root only: the node is made
// with mknod). The external tests use it too.
func ServingDaemon(t *testing.T, sys, dir, name string, spec fakeublk.DeviceSpec) *fakeublk.Child {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := fakeublk.Start(ctx, fakeublk.DaemonConfig{SysRoot: sys, Devices: []fakeublk.DeviceSpec{spec}, EventLog: filepath.Join(dir, name)})
	if err != nil && os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device nodes: "+err.Error())
	}
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}
