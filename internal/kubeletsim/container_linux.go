//go:build linux

package kubeletsim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pidsRoot is where cgroup v1's pids hierarchy is mounted. A container
// runtime kills a container through its cgroup; the pids controller is
// the one that needs no limits set to track every process.
const pidsRoot = "/sys/fs/cgroup/pids"

// containers numbers the cgroups this process makes.
var containers atomic.Uint64

// A container is the cgroup a Child runs in, as a pod's container runs in
// one: its processes are every process the child started, in whatever
// process group or session, however they daemonized.
type container struct {
	mu  sync.Mutex
	dir string // the cgroup's directory; "" once removed, or when none was made
}

// startContained starts cmd in a new cgroup of the pids hierarchy, below
// this process's own, and calls reaped with what Wait returned once the
// child has exited; then it kills the rest of the container (a container
// stops when its main process exits). Where no cgroup can be made (not
// root, no cgroup v1 pids hierarchy) the container is only the child's
// process group.
func startContained(cmd *exec.Cmd, reaped func(error)) (*container, error) {
	own, err := ownPidsCgroup()
	var dir string
	if err == nil {
		dir = filepath.Join(pidsRoot, own, fmt.Sprintf("kubeletsim-%d-%d", os.Getpid(), containers.Add(1)))
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil {
		return startUncontained(cmd, reaped)
	}
	c := &container{dir: dir}
	started := make(chan startResult, 1)
	go c.run(cmd, filepath.Join(pidsRoot, own), started, reaped)
	res := <-started
	if res.err != nil {
		_ = removeCgroup(dir)
		if !res.joined { // a cgroup this process may make but not join
			return startUncontained(cmd, reaped)
		}
		return nil, res.err
	}
	return c, nil
}

// startUncontained starts cmd in no cgroup of its own: its container is
// its process group.
func startUncontained(cmd *exec.Cmd, reaped func(error)) (*container, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { reaped(cmd.Wait()) }()
	return &container{}, nil
}

// startResult is how run's start went: whether its thread joined the
// cgroup, and what the start returned.
type startResult struct {
	joined bool
	err    error
}

// run starts cmd in c's cgroup and waits for it. A process is forked into
// the cgroup of the thread that forks it: this goroutine's thread joins
// c's cgroup for the fork and goes back to own, its own. It stays locked
// until the child has exited, for a Pdeathsig the child may have is bound
// to the thread that started it; if it could not go back, the thread ends
// with the goroutine (it is never unlocked).
func (c *container) run(cmd *exec.Cmd, own string, started chan<- startResult, reaped func(error)) {
	runtime.LockOSThread()
	tid := []byte(strconv.Itoa(unix.Gettid()))
	if err := os.WriteFile(filepath.Join(c.dir, "tasks"), tid, 0); err != nil {
		runtime.UnlockOSThread() // it never left its cgroup
		started <- startResult{err: err}
		return
	}
	err := cmd.Start()
	back := os.WriteFile(filepath.Join(own, "tasks"), tid, 0) == nil
	started <- startResult{joined: true, err: err}
	if err == nil {
		reaped(cmd.Wait()) // its exit is when it exited, however long the rest takes to die
		_, _ = c.kill()    // whatever is left dies with the main process
	}
	if back {
		runtime.UnlockOSThread()
	}
}

// ownPidsCgroup returns this process's cgroup in the pids hierarchy.
func ownPidsCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// 8:pids:/some/path
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "pids" {
			if _, err := os.Stat(filepath.Join(pidsRoot, parts[2], "tasks")); err != nil {
				return "", err
			}
			return parts[2], nil
		}
	}
	return "", errors.New("kubeletsim: no cgroup v1 pids hierarchy")
}

// contained reports whether the container is a cgroup of its own, not yet
// removed: false where none could be made (not root, no cgroup v1 pids
// hierarchy), the container then the child's process group alone.
func (c *container) contained() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dir != ""
}

// kill SIGKILLs every process in the container, and removes its cgroup
// once it is empty. It reports false when there is no cgroup: the caller
// kills the process group.
func (c *container) kill() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return false, nil
	}
	if err := killCgroup(c.dir); err != nil {
		return true, err
	}
	c.dir = ""
	return true, nil
}

// killBound is how long killCgroup keeps killing: a process forks
// between the read of the cgroup's members and their SIGKILL, so it reads
// again until the cgroup is empty; the kernel ends a SIGKILLed process at
// its next run, later on a loaded machine.
const killBound = 10 * time.Second

// killCgroup SIGKILLs the cgroup's processes until it has none, then
// removes it.
func killCgroup(dir string) error {
	self := os.Getpid()
	for end := time.Now().Add(killBound); ; {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			// Never this process, whose thread forks the child in the cgroup.
			if pid, err := strconv.Atoi(f); err == nil && pid != self {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return removeCgroup(dir)
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
		if time.Now().After(end) {
			return fmt.Errorf("kubeletsim: %s still has processes %v after SIGKILL for %v", dir, pids, killBound)
		}
		time.Sleep(time.Millisecond)
	}
}

// removeCgroup removes an empty cgroup; it stays busy until the kernel
// has released its last process, a moment after that process's exit.
func removeCgroup(dir string) error {
	var err error
	for range 1000 {
		if err = unix.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("kubeletsim: remove %s: %w", dir, err)
}
