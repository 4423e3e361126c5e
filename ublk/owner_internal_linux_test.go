//go:build linux

package ublk

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
