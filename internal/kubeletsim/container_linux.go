//go:build linux

package kubeletsim

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// containers numbers the cgroups this process makes.
var containers atomic.Uint64

// cgroupPrefix begins the name of each cgroup a simulator makes:
// kubeletsim-NS-PID-START-N, the inode of its PID namespace, its PID, its
// start time (which tells it from a later process given the same PID) and
// a count, so that a later simulator can tell the cgroups of one that is
// gone.
const cgroupPrefix = "kubeletsim-"

// owner is what names this process in the names of its cgroups: NS-PID-START.
var owner = sync.OnceValue(func() string {
	ns, pid := pidNamespace(), os.Getpid()
	st, err := procstat.Read(pid)
	if ns == 0 || err != nil {
		return fmt.Sprintf("0-%d-0", pid) // never taken for a simulator that is gone
	}
	return fmt.Sprintf("%d-%d-%d", ns, pid, st.StartTime)
})

// pidNamespace returns the inode of this process's PID namespace; 0 where
// it cannot be read.
func pidNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// cgroupName names a new cgroup of this process's.
func cgroupName() string {
	return fmt.Sprintf("%s%s-%d", cgroupPrefix, owner(), containers.Add(1))
}

// ownerGone reports whether the cgroup called name was made by a
// simulator that is gone: one of this PID namespace with no process of
// its PID started when it did. A simulator SIGKILLed (a test's timeout,
// an OOM kill) removed none of its cgroups, and what ran in them runs on.
// A name of another form, or of another PID namespace, is not one it can
// tell: false.
func ownerGone(name string) bool {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	f := strings.Split(rest, "-")
	if !ok || len(f) != 4 {
		return false
	}
	ns, err1 := strconv.ParseUint(f[0], 10, 64)
	pid, err2 := strconv.Atoi(f[1])
	start, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ns == 0 || ns != pidNamespace() || pid <= 0 {
		return false
	}
	st, err := procstat.Read(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return err == nil && st.StartTime != start
}

// goneTried holds the cgroups of gone simulators this process has tried
// to remove. A process SIGKILL cannot end (frozen by cgroup v1's freezer,
// as a paused sandbox is; asleep on a dead device) keeps its cgroup busy
// for as long as the kill waits, which no Start should pay twice.
var goneTried sync.Map

// goneBound is how long a Start waits for a gone simulator's cgroup to
// empty: what a SIGKILL ends is gone well within it, and a Start (any
// test's, on a CI machine) should not pay a kill's whole bound for what
// SIGKILL cannot end.
const goneBound = 2 * time.Second

// removeGone kills what runs in the cgroups in h's parent made by
// simulators that are gone, as each would have at its child's exit, and
// removes them; one that cannot be removed is tried once a process, and
// left to the next simulator.
func removeGone(h hierarchy) {
	entries, _ := os.ReadDir(h.parent)
	for _, e := range entries {
		dir := filepath.Join(h.parent, e.Name())
		if !e.IsDir() || !ownerGone(e.Name()) {
			continue
		}
		if _, tried := goneTried.LoadOrStore(dir, true); !tried {
			_, _ = (&container{dir: dir, v2: h.v2, freeze: h.freeze, wait: goneBound}).kill()
		}
	}
}

// A hierarchy is a cgroup hierarchy a container can be made in: cgroup
// v2's, where containerd and runc make a container's cgroup on most
// nodes today, or cgroup v1's pids hierarchy, the one v1 controller that
// tracks every process with no limit set.
type hierarchy struct {
	v2 bool
	// parent is this process's own cgroup in the hierarchy, as a
	// directory: the container's cgroup is made below it.
	parent string
	// freeze, in v2, kills the container as runc does on a kernel without
	// cgroup.kill (before Linux 5.14): frozen first, so that none of its
	// processes forks between the read of cgroup.procs and the SIGKILLs.
	// Tests set it; otherwise only a missing cgroup.kill chooses it.
	freeze bool
}

// String names the hierarchy and where its parent cgroup is, for a test's message.
func (h hierarchy) String() string {
	if h.v2 {
		return "cgroup v2 at " + h.parent
	}
	return "cgroup v1 pids at " + h.parent
}

// hierarchies returns the hierarchies this process's container can be
// made in, in the order it tries them: cgroup v2 where it is mounted (a
// pure v2 /sys/fs/cgroup, or the unified mount beside v1's) and the
// kernel starts a process in a v2 cgroup, as runc kills a container with
// its cgroup.kill wherever the container has a v2 cgroup (its
// signalAllProcesses); then v1's pids.
// None where /proc/self/mountinfo or /proc/self/cgroup cannot be read.
func hierarchies() []hierarchy {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	return findHierarchies(string(mountinfo), string(own), cloneIntoCgroup())
}

// findHierarchies finds in mountinfo (as /proc/self/mountinfo) where the
// cgroups of own (as /proc/self/cgroup) are: v2's first, if cloneV2.
func findHierarchies(mountinfo, own string, cloneV2 bool) []hierarchy {
	v2Path, pidsPath := ownCgroups(own)
	var v2, v1 []hierarchy
	for _, line := range strings.Split(mountinfo, "\n") {
		m, ok := parseMount(line)
		switch {
		case !ok:
		case m.fstype == "cgroup2" && v2Path != "" && cloneV2:
			if dir, ok := m.dirOf(v2Path); ok {
				v2 = append(v2, hierarchy{v2: true, parent: dir})
			}
		case m.fstype == "cgroup" && slices.Contains(strings.Split(m.options, ","), "pids") && pidsPath != "":
			if dir, ok := m.dirOf(pidsPath); ok {
				v1 = append(v1, hierarchy{parent: dir})
			}
		}
	}
	return append(v2, v1...)
}

// ownCgroups reads a process's cgroup in v2 ("0::/a/b") and in v1's pids
// hierarchy ("8:pids:/a/b") from its /proc/PID/cgroup; "" where it is in
// none.
func ownCgroups(procCgroup string) (v2, pids string) {
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "pids"):
			pids = parts[2]
		}
	}
	return v2, pids
}

// A mount is one line of /proc/self/mountinfo.
type mount struct {
	root, point     string // the mounted directory of the file system, and where
	fstype, options string // its type and its super options
}

// parseMount reads "36 25 0:31 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids".
func parseMount(line string) (mount, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	f, g := strings.Fields(pre), strings.Fields(post)
	if !ok || len(f) < 5 || len(g) < 3 {
		return mount{}, false
	}
	return mount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: g[0], options: g[2]}, true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// dirOf returns the directory of cgroup path in m: none when m mounts a
// part of the hierarchy path is not in (a container's cgroup namespace
// shows its own cgroup as /, and m's root then matches it), or when the
// directory is not there.
func (m mount) dirOf(path string) (string, bool) {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok || (rel != "" && m.root != "/" && !strings.HasPrefix(rel, "/")) {
		return "", false
	}
	dir := filepath.Join(m.point, rel)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return "", false
	}
	return dir, true
}

// cloneIntoCgroup reports whether the kernel starts a process in a cgroup
// v2 of the parent's choosing (clone3's CLONE_INTO_CGROUP, Linux 5.7),
// the only way to start one in a v2 cgroup with nothing it runs before it
// is there: v2 moves whole processes, never one thread as v1 does. It
// starts a process as Start would, in the cgroup of a descriptor no
// process can have open (above the kernel's largest nr_open), which a
// kernel that has the flag refuses with EBADF before any process exists;
// one without it says EINVAL, and a seccomp filter that refuses clone3
// (container runtimes' default profiles) ENOSYS: Go's os/exec would then
// fail every start, with no retry possible (a failed Start closes its
// pipes). The fork is os/exec's own (SysProcAttr.UseCgroupFD), never a
// clone3 by hand: that would copy only the calling thread of this
// multi-threaded program, in the middle of the runtime's state.
func cloneIntoCgroup() bool {
	return errors.Is(forkInto(math.MaxInt32), syscall.EBADF)
}

// probeProgram is a program that is nowhere: procfs makes no such file.
const probeProgram = "/proc/self/kubeletsim-no-program"

// forkInto forks a process into the v2 cgroup open at fd as Start does
// (os/exec's SysProcAttr.UseCgroupFD: clone3 with CLONE_INTO_CGROUP), one
// that ends at once, its exec of probeProgram failing. It returns what the
// start returned: ENOENT, the exec's, once the kernel forked into the
// cgroup; the fork's error where it refused to.
func forkInto(fd int) error {
	_, err := syscall.ForkExec(probeProgram, []string{probeProgram}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd},
	})
	return err
}

// A container is the cgroup a Child runs in, as a pod's container runs in
// one: its processes are every process the child started, in whatever
// process group or session, however they daemonized.
type container struct {
	mu     sync.Mutex
	dir    string // the cgroup's directory; "" once removed, or when none was made
	v2     bool
	freeze bool // hierarchy.freeze
	// wait is how long a kill waits for the cgroup to empty; zero: killBound.
	wait time.Duration
}

// startContained starts cmd in a new cgroup below this process's own, in
// the first of hs where one can be made, and calls reap, which waits for
// the child and reaps it, once it has started; then it kills the rest of the
// container (a container stops when its main process exits). First it
// removes the cgroups of simulators that are gone (removeGone). Where no
// cgroup can be made (not root, none of hs) the container is only the
// child's process group.
func startContained(hs []hierarchy, cmd *exec.Cmd, reap func()) (*container, error) {
	for _, h := range hs {
		removeGone(h)
		dir := filepath.Join(h.parent, cgroupName())
		if os.Mkdir(dir, 0o755) != nil {
			continue
		}
		c := &container{dir: dir, v2: h.v2, freeze: h.freeze}
		var joined bool
		var err error
		if h.v2 {
			joined, err = c.startV2(cmd, reap)
		} else {
			joined, err = c.startV1(cmd, h.parent, reap)
		}
		if err == nil {
			return c, nil
		}
		_ = removeCgroup(dir)
		if joined {
			return nil, err
		}
	}
	return startUncontained(cmd, reap)
}

// startUncontained starts cmd in no cgroup of its own: its container is
// its process group, SIGKILLed whole once the child has exited.
func startUncontained(cmd *exec.Cmd, reap func()) (*container, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		// The container stops with its main process: the rest of its group is
		// killed once the child has exited, while the child, a zombie until
		// reap, still holds the group's ID.
		awaitExit(cmd.Process.Pid)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		reap()
	}()
	return &container{}, nil
}

// startV2 starts cmd in c's v2 cgroup, forked straight into it
// (CLONE_INTO_CGROUP). It reports false, and cmd unstarted, where the
// cgroup cannot be opened or the kernel refuses to fork into it: a user
// who is not root may make a cgroup in a directory of theirs and still
// not move a process into it (that needs write access to the cgroup.procs
// of the common ancestor too), and a failed Start cannot be retried in
// the next hierarchy (it closes the pipes it made).
func (c *container) startV2(cmd *exec.Cmd, reap func()) (bool, error) {
	fd, err := unix.Open(c.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	if err := forkInto(fd); !errors.Is(err, syscall.ENOENT) {
		return false, fmt.Errorf("kubeletsim: fork into %s: %w", c.dir, err)
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	if err := cmd.Start(); err != nil {
		return true, err
	}
	go func() {
		reap()          // its exit is when it exited, however long the rest takes to die
		_, _ = c.kill() // whatever is left dies with the main process
	}()
	return true, nil
}

// startV1 starts cmd in c's v1 cgroup and reaps it in the background. A
// process is forked into the cgroup of the thread that forks it: the
// goroutine's thread joins c's cgroup for the fork and goes back to own,
// its own. It reports false, and cmd unstarted, where the thread cannot
// join.
func (c *container) startV1(cmd *exec.Cmd, own string, reap func()) (bool, error) {
	started := make(chan startResult, 1)
	go c.runV1(cmd, own, started, reap)
	res := <-started
	return res.joined, res.err
}

// startResult is how runV1's start went: whether its thread joined the
// cgroup, and what the start returned.
type startResult struct {
	joined bool
	err    error
}

// runV1 starts cmd in c's v1 cgroup and reaps it (reap). Its thread stays
// locked until the child has exited, for a Pdeathsig the child may have
// is bound to the thread that started it; if it could not go back, the
// thread ends with the goroutine (it is never unlocked).
func (c *container) runV1(cmd *exec.Cmd, own string, started chan<- startResult, reap func()) {
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
		reap()          // its exit is when it exited, however long the rest takes to die
		_, _ = c.kill() // whatever is left dies with the main process
	}
	if back {
		runtime.UnlockOSThread()
	}
}

// cgroup returns the directory of the container's cgroup: "" once it was
// removed, or where none could be made (not root, no cgroup hierarchy the
// simulator can use), the container then the child's process group alone.
func (c *container) cgroup() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dir
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
	bound := cmp.Or(c.wait, killBound)
	var err error
	switch {
	case !c.v2:
		err = killUntilEmpty(c.dir, bound, sigkillEach)
	case c.freeze:
		err = killFrozen(c.dir, bound)
	default:
		err = killV2(c.dir, bound)
	}
	if err == nil {
		err = removeCgroup(c.dir)
	}
	if err != nil {
		return true, err
	}
	c.dir = ""
	return true, nil
}

// killBound is how long a kill waits for the cgroup to empty: a process
// forks between a read of the cgroup's members and their SIGKILL (v1, and
// v2 unfrozen), so it reads again until the cgroup is empty; the kernel
// ends a SIGKILLed process at its next run, later on a loaded machine.
const killBound = 10 * time.Second

// killUntilEmpty reads the processes of the cgroup at dir, its
// descendants' included, and calls kill with them until there are none,
// for bound at most.
func killUntilEmpty(dir string, bound time.Duration, kill func(pids []int) error) error {
	for end := time.Now().Add(bound); ; {
		pids, err := cgroupPids(dir)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if err := kill(pids); err != nil {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("kubeletsim: %s still has processes %v after SIGKILL for %v", dir, pids, bound)
		}
		time.Sleep(time.Millisecond)
	}
}

// killV2 has the kernel SIGKILL the whole cgroup, descendants included,
// none able to fork past it: 1 written to cgroup.kill, as runc does
// (Linux 5.14). Without cgroup.kill, killFrozen.
func killV2(dir string, bound time.Duration) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return killFrozen(dir, bound)
	}
	if err != nil {
		return err
	}
	return killUntilEmpty(dir, bound, func([]int) error { return nil }) // dying
}

// killFrozen SIGKILLs a v2 cgroup's processes as runc does without
// cgroup.kill: frozen, so that none forks past the read of cgroup.procs,
// then each SIGKILLed, then thawed (a frozen process dies of SIGKILL
// too, but the freezer may not have caught one yet). A freeze that fails
// (cgroup.events unreadable, after 1 was written to cgroup.freeze) is, as
// runc's signalAllProcesses takes it, a warning: returned there, it left
// the processes frozen and alive, and every later kill failed alike
// (docs/faults.md row 2462). What the freeze would have caught, a fork
// past the read, the next read of killUntilEmpty does.
func killFrozen(dir string, bound time.Duration) error {
	return killUntilEmpty(dir, bound, func([]int) error {
		_ = freeze(dir)
		pids, err := cgroupPids(dir)
		if err == nil {
			err = sigkillEach(pids)
		}
		return errors.Join(err, os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0))
	})
}

// freezeWait bounds the wait for a cgroup to freeze: a process in an
// uninterruptible sleep (on a dead device) freezes only when it wakes,
// and the kill goes on without it, as runc's does.
const freezeWait = time.Second

// freeze freezes the v2 cgroup at dir and waits until its cgroup.events
// says it is, freezeWait at most.
func freeze(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return err
	}
	for end := time.Now().Add(freezeWait); time.Now().Before(end); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return err
		}
		if slices.Contains(strings.Split(string(b), "\n"), "frozen 1") {
			return nil
		}
	}
	return nil
}

// sigkillEach SIGKILLs each of pids; one already gone is no error.
func sigkillEach(pids []int) error {
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// cgroupPids lists the processes of the cgroup at dir and of its
// descendants (a runtime the child ran may have made some), never this
// process, whose thread forks the child in a v1 cgroup.
func cgroupPids(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	subs, err := subCgroups(dir)
	if err != nil {
		return nil, err
	}
	for _, sub := range subs {
		more, err := cgroupPids(sub)
		if err != nil && !errors.Is(err, os.ErrNotExist) { // one emptied and removed meanwhile
			return nil, err
		}
		pids = append(pids, more...)
	}
	return pids, nil
}

// subCgroups returns the cgroups right below dir.
func subCgroups(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var subs []string
	for _, e := range entries {
		if e.IsDir() {
			subs = append(subs, filepath.Join(dir, e.Name()))
		}
	}
	return subs, err
}

// removeCgroup removes an empty cgroup and its descendants; each stays
// busy until the kernel has released its last process, a moment after
// that process's exit.
func removeCgroup(dir string) error {
	subs, err := subCgroups(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, sub := range subs {
		if err := removeCgroup(sub); err != nil {
			return err
		}
	}
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

// awaitExit waits until the process pid, a child of this process, has exited,
// and leaves it unreaped: its PID, a zombie's, is no other process's until
// it is reaped.
func awaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			return // exited, or an error Wait will return too
		}
	}
}
