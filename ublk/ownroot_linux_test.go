//go:build linux

package ublk_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/ublk"
)

// The child of TestOwnRootTellsAContainersCgroupFromTheHostRoot: with
// ownRootChild set to a cgroup directory, it moves into that cgroup, makes
// a cgroup namespace and a mount namespace of its own there, as a
// container runtime does, mounts cgroup2 on the directory named by
// ownRootMount, and prints its cgroup v2 path and ownRoot's answer.
const (
	ownRootChild = "DRAINKIT_UBLK_OWNROOT_CGROUP"
	ownRootMount = "DRAINKIT_UBLK_OWNROOT_MOUNT"
)

func init() {
	cg := os.Getenv(ownRootChild)
	if cg == "" {
		return
	}
	// Namespaces are per thread: the main goroutine stays on the main
	// thread, the one /proc/self shows.
	runtime.LockOSThread()
	fail := func(what string, err error) { fmt.Println("error", what, err); os.Exit(1) }
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte("0"), 0o644); err != nil {
		fail("join cgroup", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP); err != nil {
		fail("unshare", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make mounts private", err)
	}
	if err := unix.Mount("cgroup2", os.Getenv(ownRootMount), "cgroup2", 0, ""); err != nil {
		fail("mount cgroup2", err)
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fail("read cgroup", err)
	}
	v2 := "none"
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			v2 = p
		}
	}
	fmt.Println("v2", v2, "own", ublk.OwnRootV2("/proc"))
	os.Exit(0)
}

// cgroup2Root returns where cgroup v2's root is mounted in this mount
// namespace (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host),
// skipping the test when there is none or when not root.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make cgroups and namespaces")
	}
	roots := ublk.Cgroup2Roots()
	if len(roots) == 0 {
		realpart.Missing(t, "no cgroup2 mounted at its root")
	}
	return roots[0]
}

// A server in a container on a cgroup v2 node reads its cgroup as "/": the
// runtime gave the container a cgroup namespace rooted at its cgroup. That
// "/" is the container's own cgroup, whose processes the pod's SIGKILL
// ends, and the last resort may kill holders there; a namespace made at
// the host's root cgroup reads "/" too, and there it may not. ownRoot tells
// the two apart on the real kernel: a cgroup2 mount of the namespace shows
// cgroup.type only where the namespace's root is not the host's root.
func TestOwnRootTellsAContainersCgroupFromTheHostRoot(t *testing.T) {
	root := cgroup2Root(t)
	container := filepath.Join(root, "drainkit-ownroot-"+strconv.Itoa(os.Getpid()))
	require.NoError(t, os.Mkdir(container, 0o755))
	t.Cleanup(func() { _ = os.Remove(container) })

	run := func(cg string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), ownRootChild+"="+cg, ownRootMount+"="+t.TempDir())
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	assert.Equal(t, "v2 / own true", run(container), "a namespace at a container's cgroup")
	assert.Equal(t, "v2 / own false", run(root), "a namespace at the host's root cgroup")
}
