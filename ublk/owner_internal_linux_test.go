//go:build linux

package ublk

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
