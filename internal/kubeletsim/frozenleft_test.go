//go:build linux

package kubeletsim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Fault (the kill leftovers review): the kill of a v2 container without cgroup.kill
// froze its cgroup (1 written to cgroup.freeze), then read cgroup.events to learn it was
// frozen; where that read failed, the kill returned its error there, before any SIGKILL
// and with no thaw: the container's processes were left frozen and alive, and each
// later kill froze and failed the same way. runc (signalAllProcesses) takes a failed
// freeze as a warning: it SIGKILLs each process anyway, then thaws. On this machine, a
// simulator in a mount namespace of its own (so that what it mounts goes with it), its
// child in a v2 cgroup, cgroup.events made unreadable (EIO: /proc/self/mem bind-mounted
// on it):
//
//	Kill:  before, an input/output error, cgroup.freeze 1, the child alive
//	       now, nil, the child dead of SIGKILL, the cgroup removed
func TestFrozenKillWhoseFreezeFailsStillKillsTheContainer(t *testing.T) {
	machineHierarchy(t, true)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=kill-events-unreadable")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // private: os/exec remounts / so
	out, errOut, err := outputOf(cmd)
	require.NoError(t, err, errOut)
	assert.Equal(t, "kill: <nil>\nfreeze: gone\nchild: killed\ncgroup: removed\n", string(out))
}

// killWithEventsUnreadable is the role of a simulator whose child's v2 cgroup, killed
// frozen, has a cgroup.events that cannot be read. It says, a line each, what Kill
// returned, the cgroup's cgroup.freeze after it, whether the child died of SIGKILL and
// whether the cgroup was removed.
func killWithEventsUnreadable() int {
	h, ok := v2Hierarchy()
	if !ok {
		fmt.Println("no cgroup v2")
		return 3
	}
	h.freeze = true
	child, err := start(exec.Command("sleep", "3600"), []hierarchy{h})
	if err != nil {
		fmt.Println("start failed:", err)
		return 4
	}
	dir := child.container.cgroup()
	events := filepath.Join(dir, "cgroup.events")
	if err := unix.Mount("/proc/self/mem", events, "", unix.MS_BIND, ""); err != nil {
		fmt.Println("mount failed:", err)
		return 5
	}
	if _, err := os.ReadFile(events); !errors.Is(err, syscall.EIO) {
		fmt.Println("cgroup.events still read:", err)
		return 5
	}
	fmt.Println("kill:", child.Kill())
	freeze, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze"))
	fmt.Println("freeze:", map[bool]string{true: strings.TrimSpace(string(freeze)), false: "gone"}[err == nil])
	select {
	case <-child.Exited():
		fmt.Println("child:", map[bool]string{true: "killed", false: child.Cmd.ProcessState.String()}[child.Cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL])
	case <-time.After(10 * time.Second):
		fmt.Println("child: alive 10 s after")
	}
	_, err = os.Stat(dir)
	fmt.Println("cgroup:", map[bool]string{true: "removed", false: "left"}[errors.Is(err, os.ErrNotExist)])
	_ = unix.Unmount(events, unix.MNT_DETACH)
	_ = child.Kill()
	return 0
}

// v2Hierarchy is this machine's cgroup v2 hierarchy, as Start finds it.
func v2Hierarchy() (hierarchy, bool) {
	for _, h := range hierarchies() {
		if h.v2 {
			return h, true
		}
	}
	return hierarchy{}, false
}
