//go:build linux

package ublk

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
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
	cg, err := readCgroups(context.Background(), "/proc", "self")
	assert.NoError(t, err)
	assert.NotEmpty(t, cg)
	_, err = readCgroups(context.Background(), t.TempDir(), "1")
	assert.Error(t, err)
}

// The last resort's check of a doomed holder reads its /proc/PID/cgroup,
// which the kernel serves behind its cgroup locks: a node busy creating
// and deleting cgroups can keep that read waiting. Here the file is a
// FIFO no one writes, a read that never ends. The check gives up at the
// last resort's context (its window): the holder is not known to be
// doomed, not killed, and its fate says why. Before, the read had no
// bound, and the last resort (so the daemon's stop, and every other
// holder's fate) waited on it for as long as it took.
func TestLastResortCheckGivesUpAReadThatDoesNotEnd(t *testing.T) {
	proc := t.TempDir()
	self := strconv.Itoa(os.Getpid())
	require.NoError(t, os.MkdirAll(filepath.Join(proc, self), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, self, "cgroup"), []byte("0::/kubepods/pod1/ctr\n"), 0o644))
	require.NoError(t, os.Symlink(self, filepath.Join(proc, "self")))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "99"), 0o755))
	stuck := filepath.Join(proc, "99", "cgroup")
	require.NoError(t, unix.Mkfifo(stuck, 0o600))
	defer func() { // end the read left behind: open the other end, then close it (EOF)
		if w, err := os.OpenFile(stuck, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
	}()
	held := map[int][]Holder{0: {{PID: 99, Comm: "qemu", Kind: blockdev.FD, Detail: "fd 3 -> /dev/ublkb0"}}}
	devs := map[blockdev.DevNum]int{{Major: 4000, Minor: 0}: 0}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan []HolderFate, 1)
	go func() {
		_, fates := killPinned(ctx, proc, held, devs, 0, func(int) (pinned, error) {
			t.Error("a holder whose cgroup was not read was pinned for its SIGKILL")
			return nil, os.ErrProcessDone
		})
		done <- fates
	}()
	var fates []HolderFate
	select {
	case fates = <-done:
	case <-time.After(10 * time.Second): // a watchdog, not a timing assertion: before, it never returned
		t.Fatal("the last resort's check still waits on the cgroup read")
	}
	require.Len(t, fates, 1)
	assert.False(t, fates[0].Doomed)
	assert.False(t, fates[0].Killed)
	assert.Equal(t, "its cgroup could not be read: not known to be doomed", fates[0].Reason)
	assert.Contains(t, fates[0].Err, "context deadline exceeded")
}
