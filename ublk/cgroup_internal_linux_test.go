//go:build linux

package ublk

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCgroupContainment(t *testing.T) {
	v2 := func(p string) cgroups { return cgroups{"0:": p} }
	cases := []struct {
		name         string
		server, hold cgroups
		in           bool
		own          bool // the server's "/" is its own cgroup (ownRoot)
	}{
		{"same v2 cgroup", v2("/kubepods/pod1/ctr"), v2("/kubepods/pod1/ctr"), true, false},
		{"below it (a jailer's sub-cgroup)", v2("/kubepods/pod1/ctr"), v2("/kubepods/pod1/ctr/fc/vm1"), true, false},
		{"a sibling pod", v2("/kubepods/pod1/ctr"), v2("/kubepods/pod2/ctr"), false, false},
		{"a name prefix is not a parent", v2("/kubepods/pod1/ctr"), v2("/kubepods/pod1/ctr2"), false, false},
		{"outside the cgroup namespace", v2("/"), v2("/../../system.slice"), false, false},
		{"namespace root: every visible process", v2("/"), v2("/"), false, false},
		{"v1: inside in every hierarchy", cgroups{"4:memory": "/docker/a", "3:pids": "/docker/a"},
			cgroups{"4:memory": "/docker/a", "3:pids": "/docker/a/x"}, true, false},
		{"v1: outside in one hierarchy", cgroups{"4:memory": "/docker/a", "3:pids": "/docker/a"},
			cgroups{"4:memory": "/docker/a", "3:pids": "/docker/b"}, false, false},
		{"v1: server at a root in one hierarchy", cgroups{"4:memory": "/docker/a", "3:pids": "/"},
			cgroups{"4:memory": "/docker/a", "3:pids": "/anything"}, true, false},
		{"missing hierarchy", cgroups{"4:memory": "/docker/a"}, cgroups{"0:": "/docker/a"}, false, false},
		{"own namespace root: its container's processes", v2("/"), v2("/"), true, true},
		{"own namespace root: below it", v2("/"), v2("/fc/vm1"), true, true},
		{"own namespace root: outside the namespace", v2("/"), v2("/../other"), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in, why := c.server.contains(c.hold, c.own)
			assert.Equal(t, c.in, in, why)
			if !c.in {
				assert.NotEmpty(t, why)
			}
		})
	}
}

func TestReadCgroups(t *testing.T) {
	cg, err := readCgroups("/proc", "self")
	assert.NoError(t, err)
	assert.NotEmpty(t, cg)
	_, err = readCgroups(t.TempDir(), "1")
	assert.Error(t, err)
}
