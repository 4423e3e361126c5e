//go:build linux

package blockdev_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/drainkit/drainkit/internal/loopdev"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/internal/realpart"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/blockdev"
)

func TestHoldersFindsProcessHoldingLoopDevice(t *testing.T) {
	node, dev := loopdev.Attach(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd, stdin := loopdev.Hold(t, node)
	hs, err := blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	mine := heldBy(hs, cmd.Process.Pid)
	require.Len(t, mine, 1, "holders: %v", hs)
	assert.Equal(t, blockdev.FD, mine[0].Kind)
	assert.Contains(t, mine[0].Detail, node)
	assert.NotEmpty(t, mine[0].Comm)

	stdin.Close()
	require.NoError(t, cmd.Wait())
	hs, err = blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	for _, h := range hs { // udev may probe the new device; the exited child must be gone
		assert.NotEqual(t, cmd.Process.Pid, h.PID, "holder still reported after it exited: %v", h)
	}
}

func TestHoldersReadsMountinfoAndSwaps(t *testing.T) {
	node, dev := loopdev.Attach(t)
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "42"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "comm"), []byte("qemu\n"), 0o644))
	mi := fmt.Sprintf("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"+
		"36 22 %s / /mnt/guest\\040disk rw,relatime - ext4 %s rw\n", dev, node)
	require.NoError(t, os.WriteFile(filepath.Join(proc, "42", "mountinfo"), []byte(mi), 0o644))
	swaps := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" + node + "\tpartition\t1020\t0\t-2\n"
	require.NoError(t, os.WriteFile(filepath.Join(proc, "swaps"), []byte(swaps), 0o644))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.ElementsMatch(t, []blockdev.Holder{
		{PID: 42, Comm: "qemu", Kind: blockdev.Mount, Detail: "/mnt/guest disk"},
		{Kind: blockdev.Swap, Detail: node},
	}, hs)
}

// Swap on a block device whose node was removed after swapon ("\040(deleted)"
// in /proc/swaps, as the kernel writes it; a container's /dev gone) names
// no path that resolves: which device it is is not known, and it may be
// the disk. Holders lists a possible holder with no PID for it, naming the
// swap area, where before it dropped it and the disk was taken for one
// with no swap on it. A swap file whose path does not resolve is on a
// file system, whose mount holds the disk it is on: not a possible holder.
func TestSwapOnANodeThatDoesNotResolveIsAPossibleHolder(t *testing.T) {
	_, dev := loopdev.Attach(t)
	proc := t.TempDir()
	swaps := "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n" +
		"/tmp/h2x/swnode\\040(deleted)            partition\t32764\t\t0\t\t-2\n" +
		"/nonexistent/swapfile                    file\t\t32764\t\t0\t\t-3\n"
	require.NoError(t, os.WriteFile(filepath.Join(proc, "swaps"), []byte(swaps), 0o644))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	require.Len(t, hs, 1, "%v", hs)
	assert.Equal(t, blockdev.Possible, hs[0].Kind)
	assert.Zero(t, hs[0].PID)
	assert.Regexp(t, `^swap on a block device not known: /tmp/h2x/swnode \(deleted\) does not resolve \(.*\): it may be this disk$`, hs[0].Detail)
}

func TestHoldersStopsAtContextEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := blockdev.Holders(ctx, "/proc", blockdev.DevNum{Major: 7, Minor: 0})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestHoldersIgnoresOtherDevices(t *testing.T) {
	hs, err := blockdev.Holders(context.Background(), "/proc", blockdev.DevNum{Major: 4095, Minor: 1048575})
	require.NoError(t, err)
	for _, h := range hs { // but a process this one may not read (here the sandbox's init, EACCES) may hold any
		u := blockdev.NotRead(h)
		assert.True(t, u.FDs || u.Maps, "%v", h)
	}
}

// A file held open on a file system whose server is gone (a FUSE daemon
// that hangs, an NFS server that went away: a node's volumes often do
// during a drain) must not hold the scan: a stat that asks such a file
// system for fresh attributes waits in the kernel for an answer that never
// comes, and the ublk step, which runs the scan to its end, would then
// miss its deadline and leave the daemon to die with live devices at
// SIGKILL. The scan still finds the VMM holding the device.
func TestHoldersScanIsNotHeldByAFileSystemThatStoppedAnswering(t *testing.T) {
	node, dev := loopdev.Attach(t)
	vmm, _ := loopdev.Hold(t, node)
	fs := mountStuckFS(t)
	// Held by this process. Not os.Open: Go would add the file to its
	// poller, whose epoll_ctl asks the file system (FUSE_POLL) while holding
	// the lock the server's own wait for requests needs.
	fd, err := unix.Open(filepath.Join(fs.Dir, "f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	fs.Hang()

	type result struct {
		hs  []blockdev.Holder
		err error
	}
	done := make(chan result, 1)
	go func() {
		hs, err := blockdev.Holders(context.Background(), "/proc", dev)
		done <- result{hs, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		var pids []int
		for _, h := range r.hs {
			pids = append(pids, h.PID)
		}
		assert.Contains(t, pids, vmm.Process.Pid, "the VMM is still found: %v", r.hs)
	case <-time.After(5 * time.Second): // the scan is one procfs pass: ~16 ms here
		t.Error("the holders scan is stuck on the file system that stopped answering")
		// The test's end aborts the FUSE connection, which ends the stat.
	}
}

// A loop device whose backing file is the device (losetup /dev/loopN
// /dev/ublkb0) holds it in the kernel, with no process and no open fd:
// stopping the device would fail the loop's I/O. LoopHolders names it,
// by the backing file's device number, until it is detached.
func TestLoopDeviceBackedByTheDeviceIsAHolder(t *testing.T) {
	node, dev := loopdev.Attach(t)
	var upper string
	t.Run("stacked", func(t *testing.T) {
		upper, _ = loopdev.AttachFile(t, node) // detached when this subtest ends
		hs := loopHolders(t, "/sys", []blockdev.DevNum{dev})[dev]
		require.Len(t, hs, 1, "holders: %v", hs)
		assert.Equal(t, blockdev.Loop, hs[0].Kind)
		assert.Zero(t, hs[0].PID, "kernel state: no process")
		assert.Equal(t, fmt.Sprintf("%s (backing file %s)", filepath.Base(upper), node), hs[0].Detail)
		other := blockdev.DevNum{Major: 4095, Minor: 1048575}
		assert.Empty(t, loopHolders(t, "/sys", []blockdev.DevNum{other}))
	})
	if upper == "" {
		t.Skip("no second loop device here")
	}
	assert.Empty(t, loopHolders(t, "/sys", []blockdev.DevNum{dev}), "gone once detached")
}

// A backing file reached through another path than /dev (a node made
// elsewhere, as a container's /dev is) is matched by its device number.
func TestLoopHolderIsMatchedByDeviceNumberNotPath(t *testing.T) {
	node, dev := loopdev.Attach(t)
	other := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, unix.Mknod(other, unix.S_IFBLK|0o600, int(unix.Mkdev(dev.Major, dev.Minor))))
	upper, _ := loopdev.AttachFile(t, other)
	hs := loopHolders(t, "/sys", []blockdev.DevNum{dev})[dev]
	require.Len(t, hs, 1, "holders of %s: %v", node, hs)
	assert.Equal(t, fmt.Sprintf("%s (backing file %s)", filepath.Base(upper), other), hs[0].Detail)
}

// A process that maps the device node and closes its fd keeps the device
// in use without an fd the fd scan would see: its pages fail once the
// device is stopped. The scan names it, with its PID, until it exits.
func TestProcessMappingTheDeviceIsAHolder(t *testing.T) {
	heldUntilExit(t, loopdev.Map, blockdev.Mapped, blockdev.MapHolders,
		func(node string) string { return `^mmap [0-9a-f]+-[0-9a-f]+ ` + node + `$` })
}

// heldUntilExit starts a process that holds a real loop device (hold) with
// no fd on it, and checks that the scan names it, once, as kind with a
// Detail matching detail(node), that one (the scan of one process for that
// kind) finds it too, and that the scan no longer names it once it exited.
func heldUntilExit(t *testing.T, hold func(testing.TB, string) (*exec.Cmd, io.WriteCloser), kind string,
	one func(string, map[blockdev.DevNum]bool, func(blockdev.DevNum, string)) error, detail func(node string) string) {
	t.Helper()
	node, dev := loopdev.Attach(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd, stdin := hold(t, node)
	hs, err := blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	mine := heldBy(hs, cmd.Process.Pid)
	require.Len(t, mine, 1, "holders: %v", hs)
	assert.Equal(t, kind, mine[0].Kind)
	assert.Regexp(t, detail(node), mine[0].Detail)
	assert.NotEmpty(t, mine[0].Comm)

	found := false
	err = one(fmt.Sprintf("/proc/%d", cmd.Process.Pid), map[blockdev.DevNum]bool{dev: true},
		func(d blockdev.DevNum, _ string) { found = found || d == dev })
	require.NoError(t, err)
	assert.True(t, found, "the scan of the one process sees it")

	stdin.Close()
	require.NoError(t, cmd.Wait())
	hs, err = blockdev.Holders(ctx, "/proc", dev)
	require.NoError(t, err)
	for _, h := range hs {
		assert.NotEqual(t, cmd.Process.Pid, h.PID, "holder still reported after it exited: %v", h)
	}
}

// Where /proc/PID/map_files cannot be read (it needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE), a mapping is typed by its path in maps,
// resolved from the kernel's lookup cache only; here a procfs whose
// map_files is not a directory. Adjacent mappings of the node are one.
func TestMappingIsTypedByItsPathWithoutMapFiles(t *testing.T) {
	node, dev := loopdev.Attach(t)
	proc := t.TempDir()
	write(t, proc, "42/comm", "vmm\n")
	write(t, proc, "42/map_files", "") // not a directory: every link fails ENOTDIR
	write(t, proc, "vmm", "")          // its binary: a file typed by its path too
	write(t, proc, "42/maps", "00400000-00452000 r-xp 00000000 08:02 173521      "+filepath.Join(proc, "vmm")+"\n"+
		"7f0000000000-7f0000001000 r--s 00000000 00:05 1042                       "+node+"\n"+
		"7f0000001000-7f0000003000 rw-s 00001000 00:05 1042                       "+node+"\n"+
		"7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n")
	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Holder{{PID: 42, Comm: "vmm", Kind: blockdev.Mapped, Detail: "mmap 7f0000000000-7f0000003000 " + node}}, hs)
}

// A kernel thread (no fd, no exe link: no memory map) can hold nothing
// and is not read past its fds: on a node most processes are kernel
// threads (per CPU), and reading their maps costs the scan a tenth of its
// time here. A process with no fd left but a memory map is read in full:
// it may have mapped the disk and closed the fd. (Process 43's maps is not
// one a kernel thread has, only the proof that it is not read.)
func TestScanReadsTheMappingsOfAProcessWithNoFdButNotOfAKernelThread(t *testing.T) {
	node, dev := loopdev.Attach(t)
	proc := t.TempDir()
	maps := "7f0000000000-7f0000001000 r--s 00000000 00:05 1042                       " + node + "\n"
	for _, pid := range []string{"42", "43"} {
		write(t, proc, pid+"/comm", "p"+pid+"\n")
		write(t, proc, pid+"/map_files", "") // typed by its path (see above)
		write(t, proc, pid+"/maps", maps)
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
	}
	require.NoError(t, os.Symlink("/usr/bin/vmm", filepath.Join(proc, "42", "exe")))
	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Holder{{PID: 42, Comm: "p42", Kind: blockdev.Mapped, Detail: "mmap 7f0000000000-7f0000001000 " + node}}, hs)
}

// 0 .. a process's /proc/PID/maps does not answer (here a FIFO nobody
// writes: the open waits, as a read waits for a memory-map lock held by a
// fault on a hung FUSE mount) .. MapsWait: the scan gives up on that
// process, lists it as a possible holder saying what is not known, and
// still reports what the others hold. Before, it waited for as long as the
// file system did, past the ublk step's deadline.
func TestScanIsNotHeldByAProcessWhoseMapsDoNotAnswer(t *testing.T) {
	node, dev := loopdev.Attach(t)
	proc := t.TempDir()
	write(t, proc, "42/comm", "stuck\n")
	require.NoError(t, unix.Mkfifo(filepath.Join(proc, "42/maps"), 0o600))
	write(t, proc, "43/comm", "vmm\n")
	write(t, proc, "43/map_files", "")
	write(t, proc, "43/maps", "7f0000000000-7f0000001000 rw-s 00000000 00:05 1042 "+node+"\n")
	defer func() { // the kernel answers at last: the abandoned read ends
		w, err := os.OpenFile(filepath.Join(proc, "42/maps"), os.O_WRONLY, 0)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}()

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	require.Len(t, hs, 2, "holders: %v", hs)
	assert.Equal(t, blockdev.Holder{PID: 43, Comm: "vmm", Kind: blockdev.Mapped, Detail: "mmap 7f0000000000-7f0000001000 " + node}, hs[1])
	// Its read waits in the kernel, unless the machine was too busy to
	// start it within MapsWait (a load of 10 on 2 cores), which it says.
	assert.Equal(t, blockdev.Holder{PID: 42, Comm: "stuck", Kind: blockdev.Possible, Detail: hs[0].Detail}, hs[0])
	assert.Contains(t, []string{
		"mappings not read within 250ms (/proc/PID/maps waits for the process's memory-map lock: a fault on a hung file system holds it)",
		"mappings not read within 250ms (not waiting in the kernel: the machine was too busy to run the reads in time)",
	}, hs[0].Detail)

	err = blockdev.MapHolders(filepath.Join(proc, "42"), map[blockdev.DevNum]bool{dev: true}, func(blockdev.DevNum, string) {
		t.Error("a mapping reported from maps that were not read")
	})
	assert.ErrorContains(t, err, "not read within")
}

// heldBy returns the holders in hs that are the process pid.
// pids are the PIDs of hs, in order.
func pids(hs []blockdev.Holder) []int {
	var ps []int
	for _, h := range hs {
		ps = append(ps, h.PID)
	}
	return ps
}

func heldBy(hs []blockdev.Holder, pid int) []blockdev.Holder {
	var out []blockdev.Holder
	for _, h := range hs {
		if h.PID == pid {
			out = append(out, h)
		}
	}
	return out
}

// A process that registers the device node in an io_uring's fixed files
// (fio's registerfiles, SPDK, QEMU's io_uring) and closes its fd keeps the
// device open through the ring, with no fd on it: only the ring's fd,
// anon_inode:[io_uring]. The scan names it, with its PID, until it exits.
func TestProcessHoldingTheDeviceThroughAnIoUringIsAHolder(t *testing.T) {
	heldUntilExit(t, loopdev.Ring, blockdev.Ring, blockdev.RingHolders, func(node string) string {
		return `^io_uring fd [0-9]+ slot 0 -> (` + node + `|` + filepath.Base(node) + `)` // the path since 6.14
	})
}

// ring writes a fake /proc/PID with an io_uring at fd 7 whose fdinfo is
// info (from its UserFiles line on; the kernel prints more before it).
func ring(t *testing.T, proc, pid, comm, info string) {
	t.Helper()
	write(t, proc, pid+"/comm", comm+"\n")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
	require.NoError(t, os.Symlink("anon_inode:[io_uring]", filepath.Join(proc, pid, "fd", "7")))
	write(t, proc, pid+"/fdinfo/7", "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1061\n"+info)
}

// The kernel lists a ring's registered files by path since Linux 6.14
// (escaped as mountinfo is, occupied slots only), and by the node's name
// alone before (every slot, "<none>" for an empty one): both are matched,
// the path by its device number wherever the node lives.
func TestRingListingIsMatchedInEveryKernelsFormat(t *testing.T) {
	node, dev := loopdev.Attach(t)
	elsewhere := filepath.Join(t.TempDir(), "guest disk")
	require.NoError(t, unix.Mknod(elsewhere, unix.S_IFBLK|0o600, int(unix.Mkdev(dev.Major, dev.Minor))))
	escaped := strings.ReplaceAll(elsewhere, " ", `\040`)
	proc := t.TempDir()
	ring(t, proc, "41", "fio", "UserFiles:\t3\n    1: /usr/lib/x\n    2: "+node+"\nUserBufs:\t0\n")
	ring(t, proc, "42", "spdk", "UserFiles:\t2\n    0: <none>\n    1: "+filepath.Base(node)+"\nUserBufs:\t0\n")
	ring(t, proc, "43", "qemu", "UserFiles:\t1\n    0: "+escaped+`\040(deleted)`+"\nUserBufs:\t0\n")
	ring(t, proc, "44", "idle", "UserFiles:\t0\nUserBufs:\t0\n")

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.ElementsMatch(t, []blockdev.Holder{
		{PID: 41, Comm: "fio", Kind: blockdev.Ring, Detail: "io_uring fd 7 slot 2 -> " + node},
		{PID: 42, Comm: "spdk", Kind: blockdev.Ring, Detail: "io_uring fd 7 slot 1 -> " + filepath.Base(node) +
			" (matched by name as " + node + ": the kernel gave no path)"},
		{PID: 43, Comm: "qemu", Kind: blockdev.Ring, Detail: "io_uring fd 7 slot 0 -> " + escaped + `\040(deleted)`},
	}, hs)
}

// The kernel lists a ring's registered files only when its read gets the
// ring's lock with a trylock: a busy ring's fdinfo has "UserFiles: 2" and
// no slot lines (before 6.15), or nothing of the ring at all (since); the
// first kernels wait for the lock instead. The scan reads it again a few
// times, waits RingWait at most, then goes on, lists the process as a
// possible holder of every device it scans, saying what is not known, and
// still reports what the others hold. Before, it said nothing.
func TestRingWhoseFilesTheKernelDoesNotListIsAPossibleHolder(t *testing.T) {
	node, dev := loopdev.Attach(t)
	other := blockdev.DevNum{Major: 4095, Minor: 1048575}
	proc := t.TempDir()
	ring(t, proc, "42", "busy", "SqThread:\t-1\nUserFiles:\t2\nUserBufs:\t0\nPollList:\n")
	ring(t, proc, "43", "locked", "") // 6.15: nothing of the ring without its lock
	ring(t, proc, "44", "vmm", "UserFiles:\t1\n    0: "+node+"\nUserBufs:\t0\n")
	// The first kernels wait for the lock: here a FIFO nobody writes.
	ring(t, proc, "45", "stuck", "")
	fifo := filepath.Join(proc, "45/fdinfo/7")
	require.NoError(t, os.Remove(fifo))
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	defer func() { // the ring's lock is free at last: the abandoned read ends
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		require.NoError(t, err)
		// and the read after it (EOF lists nothing) finds an idle ring
		write(t, proc, "45/fdinfo/idle", "UserFiles:\t0\n")
		require.NoError(t, os.Rename(filepath.Join(proc, "45/fdinfo/idle"), fifo))
		require.NoError(t, w.Close())
	}()

	found, err := blockdev.Scan(context.Background(), proc, []blockdev.DevNum{dev, other})
	require.NoError(t, err)
	unlisted := "io_uring fd 7: the registered files not listed by the kernel in 4 reads within 100ms " +
		"(/proc/PID/fdinfo lists them only when it gets the ring's lock, which a busy or stuck ring holds); they are not known"
	waited := "io_uring fd 7: fdinfo not read within 100ms (the kernel waited for the ring's lock); its registered files are not known"
	// A machine too busy to run a process's reads within RingWait (a load
	// of 10 on 2 cores) says so, whatever the ring: never that the kernel
	// waited for a lock it did not, never that it did not list a ring it
	// was not asked for.
	busy := "io_uring fd 7: fdinfo not read within 100ms (not waiting in the kernel: " +
		"the machine was too busy to run the reads in time); its registered files are not known"
	says := map[int][]string{42: {unlisted, busy}, 43: {unlisted, busy}, 45: {waited, busy}}
	comm := map[int]string{42: "busy", 43: "locked", 45: "stuck"}
	for _, d := range []blockdev.DevNum{dev, other} {
		var possible []blockdev.Holder
		for _, h := range found[d] {
			if h.Kind == blockdev.Possible {
				possible = append(possible, h)
				assert.Contains(t, says[h.PID], h.Detail, "%v: %v", d, h)
				assert.Equal(t, comm[h.PID], h.Comm)
				assert.Equal(t, blockdev.Unread{Rings: true}, blockdev.NotRead(h), "its rings are not known: %v", h)
			}
		}
		assert.ElementsMatch(t, []int{42, 43, 45}, pids(possible), "%v: what a possible holder holds is not known: every device", d)
	}
	assert.Contains(t, found[dev], blockdev.Holder{PID: 44, Comm: "vmm", Kind: blockdev.Ring, Detail: "io_uring fd 7 slot 0 -> " + node})
	assert.Len(t, found[dev], 4)

	dir := filepath.Join(proc, "42")
	err = blockdev.RingHolders(dir, map[blockdev.DevNum]bool{dev: true}, func(blockdev.DevNum, string) {
		t.Error("a holder reported from a ring whose files were not listed")
	})
	require.Error(t, err)
	assert.Contains(t, []string{"ublk: holders: " + dir + ": " + unlisted, "ublk: holders: " + dir + ": " + busy}, err.Error())
}

// notListed is the Detail of a ring whose fdinfo the kernel answers
// without its registered files: not listed, or, when the machine was too
// busy to make the reads within RingWait (a load of 10 on 2 cores), that;
// never that the kernel waited for its lock.
const notListed = `^io_uring fd \d+: (the registered files not listed by the kernel|fdinfo not read within 100ms \(not waiting in the kernel: the machine was too busy)`

// A real ring whose lock a task keeps (here its own io_uring_register,
// waiting on a fault that a userfaultfd does not serve) is never listed,
// however often its fdinfo is read: the process, which holds the device
// through the ring, is a possible holder at every scan, never "no holder",
// and once the lock is free the next scan knows it for what it is. Before,
// the scan found no holder and the ublk step asked the daemon to stop
// under it.
func TestProcessWhoseRingStaysLockedIsAPossibleHolderUntilListed(t *testing.T) {
	node, dev := loopdev.Attach(t)
	l := loopdev.RingLocked(t, node)
	pid := l.Cmd.Process.Pid
	dir := fmt.Sprintf("/proc/%d", pid)
	want := map[blockdev.DevNum]bool{dev: true}
	for range 3 {
		hs, err := blockdev.Holders(context.Background(), "/proc", dev)
		require.NoError(t, err)
		mine := heldBy(hs, pid)
		require.Len(t, mine, 1, "holders: %v", hs)
		assert.Equal(t, blockdev.Possible, mine[0].Kind)
		assert.Regexp(t, notListed, mine[0].Detail)
		holds, unknown := blockdev.ProcessHolds(context.Background(), dir, want)
		assert.False(t, holds)
		assert.NotEmpty(t, unknown, "not known, so not free")
	}

	l.Unlock(t)
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	mine := heldBy(hs, pid)
	require.Len(t, mine, 1, "holders: %v", hs)
	assert.Equal(t, blockdev.Ring, mine[0].Kind)
	holds, unknown := blockdev.ProcessHolds(context.Background(), dir, want)
	assert.True(t, holds)
	assert.Empty(t, unknown)
	holds, unknown = blockdev.ProcessHolds(context.Background(), dir, map[blockdev.DevNum]bool{{Major: 4095, Minor: 1048575}: true})
	assert.False(t, holds, "a device it does not hold")
	assert.Empty(t, unknown, "known")
}

// A ring whose fd the process closed lives on through its memory mapping
// (as when its fd was passed to another process, or registered with
// IORING_REGISTER_RING_FDS and closed), and so do its registered files:
// with no ring fd, there is no fdinfo to list them. The scan lists the
// process as a possible holder: what it holds is not known.
func TestProcessWithARingButNoRingFdIsAPossibleHolder(t *testing.T) {
	node, dev := loopdev.Attach(t)
	cmd, stdin := loopdev.RingMapped(t, node)
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	mine := heldBy(hs, cmd.Process.Pid)
	require.Len(t, mine, 1, "holders: %v", hs)
	assert.Equal(t, blockdev.Possible, mine[0].Kind)
	assert.Contains(t, mine[0].Detail, "io_uring mapped with no io_uring fd")
	assert.True(t, blockdev.NotRead(mine[0]).Rings, "what its ring holds is not known")

	stdin.Close()
	require.NoError(t, cmd.Wait())
	hs, err = blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	assert.Empty(t, heldBy(hs, cmd.Process.Pid), "gone with the process")
}

// 0 .. a scan of procfs takes 10 ms a process (a loaded node's: seconds
// for its processes) .. 205 ms: its context ends, and it stops there,
// saying which processes it did not read (what they hold is not known)
// and reporting what it found until then: swap, read first, and the mount
// of a process it read. Before, it said only ctx.Err(), and the ublk step,
// which could not tell what was not read, ran every scan to its end,
// past its deadline.
func TestScanCutShortSaysWhichProcessesItDidNotRead(t *testing.T) {
	node, dev := loopdev.Attach(t)
	synctest.Test(t, func(t *testing.T) {
		proc := t.TempDir()
		for pid := 1; pid <= 100; pid++ {
			write(t, proc, fmt.Sprintf("%d/comm", pid), "p\n")
		}
		write(t, proc, "10/mountinfo", fmt.Sprintf("36 22 %s / /mnt/disk rw - ext4 %s rw\n", dev, node))
		write(t, proc, "99/mountinfo", fmt.Sprintf("37 22 %s / /mnt/other rw - ext4 %s rw\n", dev, node))
		write(t, proc, "swaps", "Filename\tType\tSize\tUsed\tPriority\n"+node+"\tpartition\t1020\t0\t-2\n")
		ctx, cancel := context.WithTimeout(context.Background(), 205*time.Millisecond)
		defer cancel()

		var read []string
		found, err := blockdev.ScanWithHook(ctx, proc, []blockdev.DevNum{dev}, func(dir string) {
			read = append(read, filepath.Base(dir))
			time.Sleep(10 * time.Millisecond)
		})
		var cut *blockdev.CutError
		require.ErrorAs(t, err, &cut)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 100, cut.Total)
		require.Len(t, read, 21, "20 read in 200 ms, the 21st cut")
		assert.Len(t, cut.Unread, 80, "the one cut mid-way is not read")
		assert.Equal(t, read[20], strconv.Itoa(cut.Unread[0]))
		assert.Contains(t, cut.Unread, 99)
		assert.Equal(t, "ublk: holders: 80 of 100 processes not read: context deadline exceeded", err.Error())
		assert.Equal(t, []blockdev.Holder{
			{Kind: blockdev.Swap, Detail: node},
			{PID: 10, Comm: "p", Kind: blockdev.Mount, Detail: "/mnt/disk"},
		}, found[dev], "not the mount of 99, not read")
	})
}

// ProcessHolds is the ublk last resort's check of a doomed holder just
// before its SIGKILL, inside the last resort's part of the reserve (150 ms
// of sandboxd's 500 ms). 0: a VMM with the disk open (fd 3) and a busy
// io_uring (QEMU's aio=io_uring: the kernel does not list the ring's
// registered files) holds it, and that is the answer: its ring is not read.
// Then with its fd closed, the ring never listed: read until the check's
// context ends, 2 ms, not past it, and what was not read is not known.
// Before, ProcessHolds read every ring and the maps whatever it had found,
// bounded only by RingWait and MapsWait (up to 350 ms): here 7 ms for both
// answers, the ring's four reads.
func TestProcessHoldsStopsAtTheFirstHoldAndAtItsContextsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		proc := t.TempDir()
		node := filepath.Join(t.TempDir(), "ublkb0")
		require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
		dir := filepath.Join(proc, "7")
		write(t, proc, "7/fdinfo/9", "SqThread:\t-1\nUserFiles:\t2\nUserBufs:\t0\n")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
		require.NoError(t, os.Symlink(node, filepath.Join(dir, "fd", "3")))
		require.NoError(t, os.Symlink("anon_inode:[io_uring]", filepath.Join(dir, "fd", "9")))
		want := map[blockdev.DevNum]bool{{Major: 4000, Minor: 0}: true}

		start := time.Now()
		holds, unknown := blockdev.ProcessHolds(context.Background(), dir, want)
		assert.True(t, holds)
		assert.Empty(t, unknown)
		assert.Zero(t, time.Since(start), "answered by the fd: the ring not read")

		require.NoError(t, os.Remove(filepath.Join(dir, "fd", "3")))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		start = time.Now()
		holds, unknown = blockdev.ProcessHolds(ctx, dir, want)
		assert.False(t, holds)
		require.NotEmpty(t, unknown, "not known, so not free")
		assert.Contains(t, unknown[0], "not all read before the check's end")
		assert.Equal(t, 2*time.Millisecond, time.Since(start), "read until its context ends")
		time.Sleep(blockdev.RingWait) // the read given up ends by itself
	})
}

// A process whose own fds or maps cannot be read, though it has not
// exited (EACCES: a VMM of another user, or non-dumpable, and a server
// without CAP_SYS_PTRACE; EMFILE: the server out of file descriptors for
// a moment), may hold the device: the scan lists it as a possible holder
// of every device, naming what was not read and the error, and the last
// resort's check says what of it is not known. Here the fake procfs's fd
// is a file (ENOTDIR) and maps a directory (EISDIR), as root cannot be
// refused. Before, the scan listed nothing for either and ProcessHolds
// said "holds none, all known": the ublk step asked the daemon to stop
// under it.
func TestProcessWhoseFilesCannotBeReadIsAPossibleHolder(t *testing.T) {
	dev := blockdev.DevNum{Major: 4000, Minor: 0}
	other := blockdev.DevNum{Major: 4095, Minor: 1048575}
	proc := t.TempDir()
	write(t, proc, "42/comm", "vmm\n")
	write(t, proc, "42/fd", "") // not a directory: ENOTDIR
	write(t, proc, "42/maps", "")
	write(t, proc, "43/comm", "vmm2\n")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "43/fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "43/maps"), 0o755)) // EISDIR at its read
	require.NoError(t, os.Symlink("/usr/bin/vmm", filepath.Join(proc, "43", "exe")))
	write(t, proc, "44/comm", "gone\n") // exited: no fd, no maps
	write(t, proc, "45/comm", "idle\n")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "45/fd"), 0o755))
	write(t, proc, "45/maps", "")

	found, err := blockdev.Scan(context.Background(), proc, []blockdev.DevNum{dev, other})
	require.NoError(t, err)
	for _, d := range []blockdev.DevNum{dev, other} {
		require.Len(t, found[d], 2, "%v: %v", d, found[d])
		h42, h43 := found[d][0], found[d][1]
		assert.Equal(t, 42, h42.PID)
		assert.Equal(t, blockdev.Possible, h42.Kind)
		assert.Regexp(t, `^fds not read \(open .*/42/fd: not a directory\): its open files and io_uring fds are not known$`, h42.Detail)
		assert.Equal(t, blockdev.Unread{FDs: true}, blockdev.NotRead(h42))
		assert.Equal(t, 43, h43.PID)
		assert.Equal(t, blockdev.Possible, h43.Kind)
		assert.Regexp(t, `^mappings not read \(read .*/43/maps: is a directory\): its mappings are not known$`, h43.Detail)
		assert.Equal(t, blockdev.Unread{Maps: true}, blockdev.NotRead(h43))
	}
	want := map[blockdev.DevNum]bool{dev: true}
	for _, pid := range []string{"42", "43"} {
		holds, unknown := blockdev.ProcessHolds(context.Background(), filepath.Join(proc, pid), want)
		assert.False(t, holds, pid)
		assert.Len(t, unknown, 1, "%s: not read, so not known free", pid)
	}
	holds, unknown := blockdev.ProcessHolds(context.Background(), filepath.Join(proc, "44"), want)
	assert.False(t, holds)
	assert.Empty(t, unknown, "exited: holds nothing")
	err = blockdev.MapHolders(filepath.Join(proc, "43"), want, func(blockdev.DevNum, string) {})
	assert.ErrorContains(t, err, "is a directory")
}

// The last resort checks its doomed holders eight at a time, so a check
// may start once its window is over; a VMM may have thousands of fds.
// ProcessHolds looks at its context every 64 fds and reads none past its
// end: here a VMM with 1000 fds, the disk at the last, checked with a
// context already over, is not known (its fds not all read), and with
// time left is found holding it. Before, the check read every fd whatever
// its context said (and found the hold), so row 139's "reads nothing past
// the window's end" held for the rings and the maps only.
func TestProcessHoldsStopsReadingFdsAtItsContextsEnd(t *testing.T) {
	proc := t.TempDir()
	node := filepath.Join(t.TempDir(), "ublkb0")
	require.NoError(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(4000, 0))))
	dir := filepath.Join(proc, "7")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	for fd := range 999 {
		require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "fd", strconv.Itoa(fd))))
	}
	require.NoError(t, os.Symlink(node, filepath.Join(dir, "fd", "999"))) // read last (by name)
	want := map[blockdev.DevNum]bool{{Major: 4000, Minor: 0}: true}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	holds, unknown := blockdev.ProcessHolds(ctx, dir, want)
	assert.False(t, holds, "fd 999 read past the check's end")
	require.Len(t, unknown, 1)
	assert.Equal(t, "its fds, rings and mappings not all read before the check's end (context canceled)", unknown[0])

	holds, unknown = blockdev.ProcessHolds(context.Background(), dir, want)
	assert.True(t, holds)
	assert.Empty(t, unknown)
}

// A holder is named by its PID and its start time (/proc/PID/stat's field
// 22), read once for each process the scan lists: the kernel gives a PID
// to another process once its process is reaped, and the start time tells
// the two apart. Here the real process holding a loop device, and a fake
// procfs's mount (its stat unreadable: 0). Before, holders had no start
// time.
func TestHoldersCarryTheProcessStartTime(t *testing.T) {
	node, dev := loopdev.Attach(t)
	cmd, _ := loopdev.Hold(t, node)
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	mine := heldBy(hs, cmd.Process.Pid)
	require.Len(t, mine, 1, "holders: %v", hs)
	st, err := procstat.Read(cmd.Process.Pid)
	require.NoError(t, err)
	assert.NotZero(t, st.StartTime)
	assert.Equal(t, st.StartTime, mine[0].StartTime)

	proc := t.TempDir()
	write(t, proc, "42/comm", "qemu\n")
	write(t, proc, "42/stat", "42 (qemu) S 1 "+strings.Repeat("0 ", 17)+"1234 0 0\n")
	write(t, proc, "42/mountinfo", fmt.Sprintf("36 22 %s / /mnt/disk rw - ext4 %s rw\n", dev, node))
	write(t, proc, "43/comm", "other\n")
	write(t, proc, "43/mountinfo", fmt.Sprintf("36 22 %s / /mnt/disk rw - ext4 %s rw\n", dev, node))
	hs, err = blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Holder{
		{PID: 42, Comm: "qemu", StartTime: 1234, Kind: blockdev.Mount, Detail: "/mnt/disk"},
		{PID: 43, Comm: "other", Kind: blockdev.Mount, Detail: "/mnt/disk"},
	}, hs)
}

// A ring's fdinfo that cannot be read, though the fd is still open and
// the process alive (EACCES, EMFILE in the server: here a directory,
// EISDIR), says nothing of the ring's registered files: the process is a
// possible holder naming the error, and the last resort's check says it
// is not known. Before, the read's error was taken for a ring closed
// since the fd listing, holding nothing.
func TestRingWhoseFdinfoCannotBeReadIsAPossibleHolder(t *testing.T) {
	dev := blockdev.DevNum{Major: 4000, Minor: 0}
	proc := t.TempDir()
	ring(t, proc, "42", "vmm", "")
	info := filepath.Join(proc, "42/fdinfo/7")
	require.NoError(t, os.Remove(info))
	require.NoError(t, os.Mkdir(info, 0o755))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	require.Len(t, hs, 1, "%v", hs)
	assert.Equal(t, blockdev.Possible, hs[0].Kind)
	assert.Regexp(t, `^io_uring fd 7 \(read .*/42/fdinfo/7: is a directory\): fdinfo not read; the registered files are not known$`, hs[0].Detail)
	holds, unknown := blockdev.ProcessHolds(context.Background(), filepath.Join(proc, "42"), map[blockdev.DevNum]bool{dev: true})
	assert.False(t, holds)
	assert.Len(t, unknown, 1, "not read, so not known free")
	assert.ErrorContains(t, blockdev.RingHolders(filepath.Join(proc, "42"), map[blockdev.DevNum]bool{dev: true}, nil), "is a directory")
}

// A mount namespace's mounts are read once, from one of its processes:
// when the first one's mountinfo cannot be read (EMFILE in the server for
// a moment, the process exiting; here a directory, EISDIR), the next
// process of that namespace is read instead. Before, the namespace was
// marked read before its read, and a file system mounted on the disk was
// missed for the whole scan.
func TestMountsAreReadFromAnotherProcessWhenOnesMountinfoFails(t *testing.T) {
	dev := blockdev.DevNum{Major: 4000, Minor: 0}
	proc := t.TempDir()
	for _, pid := range []string{"41", "42"} {
		write(t, proc, pid+"/comm", "p"+pid+"\n")
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "ns"), 0o755))
		require.NoError(t, os.Symlink("mnt:[4026531841]", filepath.Join(proc, pid, "ns", "mnt")))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "41/mountinfo"), 0o755))
	write(t, proc, "42/mountinfo", fmt.Sprintf("36 22 %s / /mnt/disk rw - ext4 /dev/ublkb0 rw\n", dev))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Holder{{PID: 42, Comm: "p42", Kind: blockdev.Mount, Detail: "/mnt/disk"}}, hs)
}

// When no process of a mount namespace lets the scan read its mountinfo
// (here each a directory, EISDIR: EMFILE or ENOMEM in the server, on a
// node), the namespace's mounts are not known: its first process is a
// possible holder of every device scanned, once, naming the error.
// Before, the scan said nothing, as if the namespace mounted nothing.
func TestNamespaceWhoseMountsCannotBeReadIsAPossibleHolder(t *testing.T) {
	dev, other := blockdev.DevNum{Major: 4000, Minor: 0}, blockdev.DevNum{Major: 4000, Minor: 1}
	proc := t.TempDir()
	for _, pid := range []string{"41", "42"} {
		write(t, proc, pid+"/comm", "p"+pid+"\n")
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "ns"), 0o755))
		require.NoError(t, os.Symlink("mnt:[4026531841]", filepath.Join(proc, pid, "ns", "mnt")))
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "mountinfo"), 0o755))
	}

	found, err := blockdev.Scan(context.Background(), proc, []blockdev.DevNum{dev, other})
	require.NoError(t, err)
	for _, d := range []blockdev.DevNum{dev, other} {
		require.Len(t, found[d], 1, "%v", found[d])
		h := found[d][0]
		assert.Equal(t, 41, h.PID)
		assert.Equal(t, blockdev.Possible, h.Kind)
		assert.Regexp(t, `^mounts not read \(read .*/41/mountinfo: is a directory\): the mounts of its mount namespace are not known$`, h.Detail)
		assert.Equal(t, blockdev.Unread{Mounts: true}, blockdev.NotRead(h))
	}
}

// Where map_files cannot be read, a mapping whose path cannot be resolved
// either (here a node that is not there: one in the process's own mount
// namespace, or unlinked, or not in the lookup cache) is not known: its
// process is a possible holder, its Detail saying which mapping and why.
// Before, the mapping was taken for no block device and the process for
// one that holds nothing (no holder, no error). A memfd's or SysV
// segment's mapping (a path the kernel made up, never a node) is not one.
func TestMappingWhosePathCannotBeResolvedWithoutMapFilesIsNotKnown(t *testing.T) {
	node, dev := loopdev.Attach(t)
	proc := t.TempDir()
	gone := filepath.Join(proc, "vdb")
	write(t, proc, "42/comm", "vmm\n")
	write(t, proc, "42/map_files", "")
	write(t, proc, "42/maps", "7f0000000000-7f0000001000 rw-s 00000000 00:05 1042 "+gone+"\n"+
		"7f0000001000-7f0000002000 rw-s 00000000 00:05 1043 "+node+"\n")
	write(t, proc, "43/comm", "guest\n")
	write(t, proc, "43/map_files", "")
	write(t, proc, "43/maps", "7f0000000000-7f0040000000 rw-s 00000000 00:01 2048 /memfd:guest_mem (deleted)\n"+
		"7f0040000000-7f0040001000 rw-s 00000000 00:01 98305 /SYSV00000000 (deleted)\n"+
		"7f0040001000-7f0040002000 rw-s 00000000 00:0e 12 anon_inode:dmabuf\n")

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	require.Len(t, hs, 2, "holders: %v", hs)
	assert.Equal(t, blockdev.Holder{PID: 42, Comm: "vmm", Kind: blockdev.Mapped, Detail: "mmap 7f0000001000-7f0000002000 " + node}, hs[0])
	assert.Equal(t, 42, hs[1].PID)
	assert.Equal(t, blockdev.Unread{Maps: true}, blockdev.NotRead(hs[1]), "%v", hs[1])
	assert.Contains(t, hs[1].Detail, gone)
}

// Without map_files, a mapped path is resolved in the process's own root
// first (/proc/PID/root): a jailed or containerized VMM maps its disk node
// by a path of its mount namespace (here /dev/vdb, which is not in this
// one), and it is typed there. Before, only this process's lookup was
// tried: the mapping was not typed, the VMM only a possible holder.
func TestMappingIsTypedInTheProcesssOwnRoot(t *testing.T) {
	node, dev := loopdev.Attach(t)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(node, &st))
	proc, jail := t.TempDir(), t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(jail, "dev"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(jail, "dev", "vdb"), unix.S_IFBLK|0o600, int(st.Rdev)))
	_, err := os.Stat("/dev/vdb")
	require.ErrorIs(t, err, os.ErrNotExist, "the jail's path must not be this process's")
	write(t, proc, "44/comm", "firecracker\n")
	write(t, proc, "44/map_files", "")
	write(t, proc, "44/maps", "7f0000000000-7f0000001000 rw-s 00000000 00:05 1042 /dev/vdb\n")
	require.NoError(t, os.Symlink(jail, filepath.Join(proc, "44", "root")))

	hs, err := blockdev.Holders(context.Background(), proc, dev)
	require.NoError(t, err)
	assert.Equal(t, []blockdev.Holder{{PID: 44, Comm: "firecracker", Kind: blockdev.Mapped, Detail: "mmap 7f0000000000-7f0000001000 /dev/vdb"}}, hs)
}

// A btrfs file system mounted on the disk holds it, but btrfs gives each
// of its mounts an anonymous device number (mountinfo says 0:39 where the
// disk is 7:1): the scan names the mount by its source, and sysfs names
// the file system.
func TestBtrfsMountIsAHolder(t *testing.T) {
	node, dev, dir := loopdev.Mounted(t, "btrfs")
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	var mounts []string
	for _, h := range hs {
		if h.Kind == blockdev.Mount {
			mounts = append(mounts, h.Detail)
		}
	}
	assert.Contains(t, mounts, dir, "holders of %s: %v", node, hs)

	name := filepath.Base(node)
	fss := fileSystemHolders(t, "/sys", map[string]blockdev.DevNum{name: dev})[dev]
	require.Len(t, fss, 1, "%v", fss)
	assert.Equal(t, blockdev.FileSystem, fss[0].Kind)
	assert.Regexp(t, `^btrfs [0-9a-f-]{36} on `+name+` \(sysfs fs/btrfs/[0-9a-f-]{36}/devices/`+name+`\)$`, fss[0].Detail)
}

// A file system unmounted lazily (umount -l) while a file on it is open
// lives on, on the disk, in no mount namespace: no mountinfo shows it,
// and the process with the file open has no fd on the disk. Its sysfs
// directory shows it until the last file on it is closed.
func TestLazilyUnmountedFileSystemIsAHolderUntilItsLastFileCloses(t *testing.T) {
	node, dev, dir := loopdev.Mounted(t, "ext4")
	name := filepath.Base(node)
	devs := map[string]blockdev.DevNum{name: dev}
	want := []blockdev.Holder{{Kind: blockdev.FileSystem, Detail: "ext4 on " + name + " (sysfs fs/ext4/" + name + ")"}}
	assert.Equal(t, want, fileSystemHolders(t, "/sys", devs)[dev], "mounted")

	fd, err := unix.Open(filepath.Join(dir, "f"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	require.NoError(t, err)
	require.NoError(t, unix.Unmount(dir, unix.MNT_DETACH))
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	for _, h := range hs {
		assert.NotEqual(t, blockdev.Mount, h.Kind, "mounted nowhere: %v", h)
	}
	assert.Equal(t, want, fileSystemHolders(t, "/sys", devs)[dev], "unmounted lazily, a file open")

	require.NoError(t, unix.Close(fd)) // the last reference: the kernel frees the file system on its way out
	assert.Empty(t, fileSystemHolders(t, "/sys", devs), "freed")
}

// An ext4 file system's journal on a device of its own holds that device
// from the mount until the kernel frees the file system: no mountinfo
// names the journal's device and no sysfs holders/ lists it; procfs's
// fs/jbd2/NAME shows it, and JournalHolders names it until the unmount.
func TestExternalJournalIsAHolderUntilItsFileSystemIsUnmounted(t *testing.T) {
	node, dev, dir := loopdev.MountedWithJournal(t, "ext4")
	name := filepath.Base(node)
	devs := map[string]blockdev.DevNum{name: dev}
	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	for _, h := range hs {
		assert.NotEqual(t, blockdev.Mount, h.Kind, "no mountinfo names the journal's device: %v", h)
	}
	stacked, err := blockdev.StackHolders("/sys", name, nil)
	require.NoError(t, err)
	assert.Empty(t, stacked, "nor does sysfs holders/")
	assert.Empty(t, fileSystemHolders(t, "/sys", devs), "nor fs/ext4")

	journals, err := blockdev.JournalHolders(context.Background(), "/proc", devs, nil)
	require.NoError(t, err)
	want := []blockdev.Holder{{Kind: blockdev.FileSystem,
		Detail: "jbd2 journal on " + name + " (procfs fs/jbd2/" + name + "): an ext4 or ocfs2 file system's, on another device"}}
	assert.Equal(t, want, journals[dev], "mounted")

	require.NoError(t, unix.Unmount(dir, 0))
	journals, err = blockdev.JournalHolders(context.Background(), "/proc", devs, nil)
	require.NoError(t, err)
	assert.Empty(t, journals, "unmounted: the file system freed")
}

// An xfs file system's external log (mkfs.xfs -l logdev=) holds its
// device from the mount until the kernel frees the file system: no sysfs
// holders/ lists it, sysfs's fs/xfs names the data device alone, and
// mountinfo names the log's device only among the mount's options
// (logdev=PATH). Holders names the mount as the log's holder.
func TestXfsExternalLogIsAMountHolder(t *testing.T) {
	node, dev, dir := loopdev.MountedWithJournal(t, "xfs")
	stacked, err := blockdev.StackHolders("/sys", filepath.Base(node), nil)
	require.NoError(t, err)
	assert.Empty(t, stacked, "sysfs holders/ does not list it")
	assert.Empty(t, fileSystemHolders(t, "/sys", map[string]blockdev.DevNum{filepath.Base(node): dev}), "nor fs/xfs")

	hs, err := blockdev.Holders(context.Background(), "/proc", dev)
	require.NoError(t, err)
	var mounts []string
	for _, h := range hs {
		if h.Kind == blockdev.Mount {
			mounts = append(mounts, h.Detail)
		}
	}
	require.NotEmpty(t, mounts, "holders of %s: %v", node, hs)
	for _, m := range mounts { // one a mount namespace the mount propagated to
		assert.Equal(t, dir+" (its log: logdev="+node+")", m)
	}
}

// A jbd2 directory JournalHolders could not look for (EMFILE or ENOMEM in
// the server; here fs/jbd2 is a file: ENOTDIR) is an error naming it and
// the cause, never "no journal".
func TestJournalHoldersSaysWhatItCouldNotLookFor(t *testing.T) {
	proc := t.TempDir()
	write(t, proc, "fs/jbd2", "")
	journals, err := blockdev.JournalHolders(context.Background(), proc, map[string]blockdev.DevNum{"ublkb0": {Major: 259, Minor: 0}}, nil)
	assert.Empty(t, journals)
	assert.Regexp(t, `^ublk: jbd2 journal fs/jbd2/ublkb0 not looked for: stat .*/fs/jbd2/ublkb0: not a directory$`, err)
}

// A ublk server has its devices' char devices (/dev/ublkcN) open while it
// serves them: CharHolders names the process, once however many fds it
// has on the device, until it closes them. The node here is made with
// mknod and opened O_PATH, which needs no driver behind its numbers.
func TestCharHoldersNamesTheProcessWithTheCharDeviceOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make a device node")
	}
	dev := blockdev.DevNum{Major: 4095, Minor: 7}
	node := filepath.Join(t.TempDir(), "ublkc7")
	require.NoError(t, unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(dev.Major, dev.Minor))))
	var fds []int
	for range 2 {
		fd, err := unix.Open(node, unix.O_PATH|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		fds = append(fds, fd)
	}
	other := blockdev.DevNum{Major: 4095, Minor: 8}
	got, _, err := blockdev.CharHolders(context.Background(), "/proc", []blockdev.DevNum{dev, other})
	require.NoError(t, err)
	assert.Equal(t, map[blockdev.DevNum][]int{dev: {os.Getpid()}}, got)

	for _, fd := range fds {
		require.NoError(t, unix.Close(fd))
	}
	got, _, err = blockdev.CharHolders(context.Background(), "/proc", []blockdev.DevNum{dev})
	require.NoError(t, err)
	assert.Empty(t, got, "closed")
}

// A process whose fds cannot be read (EACCES to a reader without
// CAP_SYS_PTRACE, EMFILE in the reader; here its fd entry is not a
// directory) may have a char device open: CharHolders names it with why,
// where before it was left out, and the ublk step took a device served by
// such a process for one no process serves. A process that exited (no fd
// directory) has none, and is not named.
func TestCharHoldersNamesTheProcessesItCannotRead(t *testing.T) {
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "10", "fd"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(proc, "11"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "11", "fd"), nil, 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(proc, "12"), 0o755)) // exited: no fd directory
	held, unread, err := blockdev.CharHolders(context.Background(), proc, []blockdev.DevNum{{Major: 4095, Minor: 9}})
	require.NoError(t, err)
	assert.Empty(t, held)
	require.Len(t, unread, 1, "%v", unread)
	assert.ErrorIs(t, unread[11], unix.ENOTDIR)
}

// A ublk server maps its /dev/ublkcN (the I/O descriptors) and may close
// the fd: ReadCharsHeld finds the device mapped (map_files typed, here a
// fake procfs's link to a real node), where ReadCharsOpen finds none open.
// A mapping typed neither way, and maps that cannot be read, are errors:
// what the process maps is not known. One that exited maps nothing.
func TestReadCharsHeldFindsACharDeviceMappedWithItsFdClosed(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make a device node")
	}
	dev := blockdev.DevNum{Major: 4095, Minor: 11}
	node := filepath.Join(t.TempDir(), "ublkc11")
	require.NoError(t, unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(dev.Major, dev.Minor))))
	proc := t.TempDir()
	write(t, proc, "10/maps", "7f2c4a000000-7f2c4a001000 r--s 00000000 00:05 1042    "+node+"\n")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "10", "fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "10", "map_files"), 0o755))
	require.NoError(t, os.Symlink(node, filepath.Join(proc, "10", "map_files", "7f2c4a000000-7f2c4a001000")))
	want := map[blockdev.DevNum]bool{dev: true}

	open, complete := blockdev.CharsOpen(context.Background(), filepath.Join(proc, "10", "fd"), want)
	assert.True(t, complete)
	assert.Empty(t, open, "its fd closed")
	open, mapped, complete, err := blockdev.ReadCharsHeld(context.Background(), filepath.Join(proc, "10"), want)
	require.NoError(t, err)
	assert.True(t, complete)
	assert.Empty(t, open)
	assert.Equal(t, []blockdev.DevNum{dev}, mapped)

	write(t, proc, "11/maps", "7f2c4a000000-7f2c4a001000 r--s 00000000 00:05 1042    /nonexistent/ublkc11\n")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "11", "fd"), 0o755))
	write(t, proc, "11/map_files", "") // not readable (ENOTDIR), as to a reader without CAP_SYS_ADMIN (EPERM)
	_, mapped, _, err = blockdev.ReadCharsHeld(context.Background(), filepath.Join(proc, "11"), want)
	assert.Empty(t, mapped)
	assert.ErrorContains(t, err, "mapping of /nonexistent/ublkc11 not typed", "map_files not read, nor the path resolved")

	require.NoError(t, os.MkdirAll(filepath.Join(proc, "12", "fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "12", "maps"), 0o755))
	_, _, _, err = blockdev.ReadCharsHeld(context.Background(), filepath.Join(proc, "12"), want)
	assert.Error(t, err, "maps not read")

	require.NoError(t, os.MkdirAll(filepath.Join(proc, "13", "fd"), 0o755))
	_, mapped, complete, err = blockdev.ReadCharsHeld(context.Background(), filepath.Join(proc, "13"), want)
	assert.NoError(t, err, "exited: no maps")
	assert.True(t, complete)
	assert.Empty(t, mapped)
}

// loopHolders is blockdev.LoopHolders, which must read all it looks at.
func loopHolders(t *testing.T, sysRoot string, devs []blockdev.DevNum) map[blockdev.DevNum][]blockdev.Holder {
	t.Helper()
	hs, err := blockdev.LoopHolders(context.Background(), sysRoot, devs, nil)
	require.NoError(t, err)
	return hs
}

// fileSystemHolders is blockdev.FileSystemHolders, which must read all it
// looks at.
func fileSystemHolders(t *testing.T, sysRoot string, devs map[string]blockdev.DevNum) map[blockdev.DevNum][]blockdev.Holder {
	t.Helper()
	hs, err := blockdev.FileSystemHolders(context.Background(), sysRoot, devs, nil)
	require.NoError(t, err)
	return hs
}

// What a sysfs read could not say is an error naming it and the cause,
// with what the other reads found: a loop device whose backing file is
// not read (loop3, EISDIR here, as EMFILE would fail it), an fs/ directory
// not looked in (ext4, ENOTDIR), btrfs's not listed. A device that is no
// loop device (sda) and a file system type with no directory (f2fs) are
// no error. Before, each was taken for nothing there, and a caller had the
// disk stopped under the loop device or file system.
func TestLoopAndFileSystemHoldersSayWhatTheyCouldNotRead(t *testing.T) {
	sys := t.TempDir()
	dev := blockdev.DevNum{Major: 259, Minor: 0}
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755))
	require.NoError(t, os.Symlink("../../block/ublkb0", filepath.Join(sys, "dev", "block", dev.String())))
	write(t, sys, "block/ublkb0/dev", "259:0\n")
	write(t, sys, "block/sda/dev", "8:0\n")
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "block/loop3/loop/backing_file"), 0o755))
	write(t, sys, "block/loop4/loop/backing_file", "/nonexistent/ublkb0\n")

	loops, err := blockdev.LoopHolders(context.Background(), sys, []blockdev.DevNum{dev}, nil)
	require.Len(t, loops[dev], 1, "%v", loops)
	assert.Regexp(t, `^loop4 \(backing file /nonexistent/ublkb0; matched by name`, loops[dev][0].Detail)
	assert.Regexp(t, `^ublk: loop device loop3's backing file not read: read .*/loop3/loop/backing_file: is a directory$`, err)

	write(t, sys, "fs/ext4", "")
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "fs/xfs/ublkb0"), 0o755))
	write(t, sys, "fs/btrfs", "")
	fss, err := blockdev.FileSystemHolders(context.Background(), sys, map[string]blockdev.DevNum{"ublkb0": dev}, nil)
	assert.Equal(t, map[blockdev.DevNum][]blockdev.Holder{dev: {{Kind: blockdev.FileSystem, Detail: "xfs on ublkb0 (sysfs fs/xfs/ublkb0)"}}}, fss)
	assert.Regexp(t, `^ublk: file system fs/ext4/ublkb0 not looked for: lstat .*/fs/ext4/ublkb0: not a directory\n`+
		`ublk: btrfs file systems not listed: .*/fs/btrfs: not a directory$`, err)
}
