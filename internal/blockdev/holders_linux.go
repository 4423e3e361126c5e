//go:build linux

package blockdev

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// Holders returns every user of the block device dev that procfs at
// procRoot (normally "/proc") shows: processes with the device node open
// (/proc/PID/fd links whose target is a block device with that rdev,
// wherever the node lives, chroots included), processes with it
// memory-mapped, fd closed or not (/proc/PID/maps, Mapped), processes
// with it among an io_uring's registered files, fd closed or not (the
// ring's /proc/PID/fdinfo, Ring), mounts of a file system on it
// (/proc/PID/mountinfo, one entry per mount namespace; a btrfs mount,
// which shows an anonymous device number, by its source; an xfs mount
// whose external log or realtime device it is, by its logdev= or rtdev=
// option) and swap on it (/proc/swaps). It works for any block device, loop and ublk alike.
// Devices stacked on it, loop devices backed by it and file systems alive
// on it are kernel state that sysfs shows: StackHolders, LoopHolders and
// FileSystemHolders.
//
// A process part of whose holds the kernel did not show is a Possible
// holder, of every device scanned: its mappings when they are not read
// within MapsWait (see MapHolders); its rings' registered files, which
// the kernel lists only when its read gets a ring's lock, when they are not
// listed after a few reads within RingWait (see RingHolders); and the
// registered files of a ring it has mapped with no io_uring fd to read
// them by (the ring's fd closed, passed on, or registered with
// IORING_REGISTER_RING_FDS: the ring, and the files registered in it,
// live on through the mapping, but only a ring fd's fdinfo lists them).
// Its Detail says what is not known and why. A ring set up with
// IORING_SETUP_NO_MMAP and its fd closed leaves no trace in procfs at all.
//
// A mount namespace none of whose processes' mountinfo could be read
// (EMFILE, ENOMEM in this process) has mounts that are not known: its
// first process is a Possible holder whose Detail starts with
// MountsNotRead.
//
// Processes that vanish during the scan (ENOENT, ESRCH) are skipped. A
// process whose own fds or maps cannot be read for another reason
// (EACCES: another user's or a non-dumpable process and no
// CAP_SYS_PTRACE; EMFILE, ENOMEM: a transient failure of this process) is
// a Possible holder whose Detail starts with FDsNotRead or MapsNotRead and
// names the error (see NotRead), and so is one with a mapping typed
// neither through map_files nor by its path (below: a node in the
// process's own mount namespace, unlinked, or not in the lookup cache; a
// memfd's, a SysV segment's or an anon_inode's mapping is never a node):
// it may hold the device, and taken for one
// that holds nothing the ublk step asked the daemon to stop under a VMM
// holding its disk. So a caller that is not root finds every other user's
// process a possible holder (run the step as root, where the VMMs are
// visible), and a caller in a PID namespace sees only that namespace's. Open files are classified from the attributes the
// kernel already has, so a file on a file system whose server is gone (a
// hung NFS or FUSE mount) does not hold the scan, and so are mapped files
// (through /proc/PID/map_files, or the mapped path resolved only from the
// kernel's lookup cache where map_files is not readable: it needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). When ctx ends before the scan
// is complete, Holders returns what it found until then and a *CutError
// naming the processes it did not read (wrapping ctx.Err()); swap is read
// first, so a cut scan still has it.
func Holders(ctx context.Context, procRoot string, dev DevNum) ([]Holder, error) {
	found, err := Scan(ctx, procRoot, []DevNum{dev})
	return found[dev], err
}

// Scan is Holders for several devices in one pass over procfs. A Possible
// holder is listed once for each of devs: what it holds is not known.
func Scan(ctx context.Context, procRoot string, devs []DevNum) (map[DevNum][]Holder, error) {
	return ScanWithHook(ctx, procRoot, devs, nil)
}

// ScanWithHook is Scan calling before, when it is not nil, with each
// process's procfs directory before reading it: tests make a scan as slow
// as a loaded node's with it, in virtual time.
func ScanWithHook(ctx context.Context, procRoot string, devs []DevNum, before func(dir string)) (map[DevNum][]Holder, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("ublk: holders: %w", err)
	}
	want := wantSet(devs)
	out := map[DevNum][]Holder{}
	// Swap first: kernel state with no process, which a scan cut short
	// would otherwise not have read at all.
	unresolved := swapHolders(filepath.Join(procRoot, "swaps"), want, func(dev DevNum, name string) {
		out[dev] = append(out[dev], Holder{Kind: Swap, Detail: name})
	})
	for _, u := range unresolved {
		for _, dev := range devs {
			out[dev] = append(out[dev], Holder{Kind: Possible, Detail: SwapNotKnown + ": " + u + ": it may be this disk"})
		}
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	seenNS := map[string]bool{}
	unreadNS := map[string]unreadMounts{} // namespaces no process let the scan read, yet
	mapped := newMapCache()
	for i, pid := range pids {
		if err := ended(ctx); err != nil {
			mountsNotRead(out, devs, seenNS, unreadNS)
			return out, &CutError{Unread: pids[i:], Total: len(pids), Err: err}
		}
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		if before != nil {
			before(dir)
		}
		var comm string
		var start uint64
		read := false
		add := func(dev DevNum, kind, detail string) {
			if !read { // once per holder, not per process scanned
				comm, start, read = readComm(dir), readStartTime(dir), true
			}
			out[dev] = append(out[dev], Holder{PID: pid, Comm: comm, StartTime: start, Kind: kind, Detail: detail})
		}
		unknown := processHolders(ctx, dir, want, &mapped, add)
		if err := ended(ctx); err != nil { // its reads cut short: what it said is not all
			mountsNotRead(out, devs, seenNS, unreadNS)
			return out, &CutError{Unread: pids[i:], Total: len(pids), Err: err}
		}
		for _, u := range unknown {
			for _, dev := range devs {
				add(dev, Possible, u)
			}
		}
		ns, _ := os.Readlink(filepath.Join(dir, "ns", "mnt"))
		if ns != "" && seenNS[ns] {
			continue
		}
		// The namespace is read once, from the first of its processes
		// whose mountinfo could be read: marked before, a read that failed
		// (EMFILE for a moment, the process exiting) lost every mount of
		// that namespace for the scan, a file system on the disk with them.
		mounts, err := boundedMountHolders(ctx, filepath.Join(dir, "mountinfo"), mountTable(procRoot, dir, ns), want)
		if ended(ctx) != nil { // its namespace's mounts not all read: not known
			mountsNotRead(out, devs, seenNS, unreadNS)
			return out, &CutError{Unread: pids[i:], Total: len(pids), Err: ended(ctx)}
		}
		for _, m := range mounts {
			add(m.dev, Mount, m.detail)
		}
		seenNS[ns] = ns != "" && err == nil
		key := ns
		if key == "" { // its namespace not known: its own mounts
			key = dir
		}
		// EINVAL: a zombie, or a process exiting, has no mount namespace
		// any more, and nothing to mount with.
		if _, recorded := unreadNS[key]; err != nil && !exited(err) && !errors.Is(err, unix.EINVAL) && !recorded {
			unreadNS[key] = unreadMounts{pid, dir, err}
		}
	}
	mountsNotRead(out, devs, seenNS, unreadNS)
	return out, nil
}

// ended is ctx.Err(), or context.DeadlineExceeded once ctx's deadline has
// passed by the clock: on a loaded node the goroutine that cancels a
// context at its deadline waits for a CPU, and its Err stays nil for tens
// of milliseconds after (up to 20 ms on a 20 ms scan, 2 cores at load; a
// scan of 355 processes in a loaded guest ended 0.25 s past its stage).
// Before, the scan went on reading processes until the timer ran
// (docs/faults.md row 3341).
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if end, ok := ctx.Deadline(); ok && !time.Now().Before(end) {
		return context.DeadlineExceeded
	}
	return nil
}

// mountsNotRead adds to out, for each namespace none of whose processes'
// mountinfo could be read, the first process tried as a possible holder of
// every device (the one whose PID a mount the scan before found is listed
// at): the namespace's mounts are not known. Said nothing, they were
// dropped as if there were none.
func mountsNotRead(out map[DevNum][]Holder, devs []DevNum, seenNS map[string]bool, unreadNS map[string]unreadMounts) {
	var unread []unreadMounts
	for ns, u := range unreadNS {
		if !seenNS[ns] {
			unread = append(unread, u)
		}
	}
	slices.SortFunc(unread, func(a, b unreadMounts) int { return a.pid - b.pid })
	for _, u := range unread {
		comm, start := readComm(u.dir), readStartTime(u.dir)
		for _, dev := range devs {
			out[dev] = append(out[dev], Holder{PID: u.pid, Comm: comm, StartTime: start, Kind: Possible,
				Detail: fmt.Sprintf("%s (%v): the mounts of its mount namespace are not known", MountsNotRead, u.err)})
		}
	}
}

// unreadMounts is the first process of a mount namespace whose mountinfo
// a scan could not read, and why.
type unreadMounts struct {
	pid int
	dir string
	err error
}

// processHolders calls found for each wanted device the process whose
// procfs directory is dir holds through an fd, a mapping or a ring's
// registered files (kind FD, Mapped or Ring), and returns what of its
// holds is not known, one Possible holder's Detail for each reason. Its
// bounded reads end at ctx's end too; what is then not known is the
// caller's to say (ctx.Err()).
func processHolders(ctx context.Context, dir string, want map[DevNum]bool, mapped **mapCache, found func(dev DevNum, kind, detail string)) (unknown []string) {
	rings, fds, fdErr := fdHolders(ctx, dir, want, func(dev DevNum, fd string) { found(dev, FD, fd) })
	if exited(fdErr) {
		fdErr = nil // gone: no fd; its maps, gone too, say the same
	}
	switch {
	case fds == 0 && noMemory(dir):
		return nil // a kernel thread: no file and no memory to hold a disk with
	case ended(ctx) != nil:
		return nil // the caller says what is not known
	case fdErr != nil:
		// Not read is not "holds nothing": a VMM whose fds the server may
		// not read (EACCES: a non-dumpable process, or another user's,
		// and no CAP_SYS_PTRACE) or could not read now (EMFILE) may hold
		// the disk, and taken for one that holds none the daemon was
		// asked to stop under it.
		unknown = append(unknown, fmt.Sprintf("%s (%v): its open files and io_uring fds are not known", FDsNotRead, fdErr))
	}
	if len(rings) > 0 {
		if u := ringHolders(ctx, dir, rings, want, func(dev DevNum, r string) { found(dev, Ring, r) }); u != "" {
			unknown = append(unknown, u)
		}
	}
	ringMapped, err := boundedMapHolders(ctx, dir, want, mapped, func(dev DevNum, m string) { found(dev, Mapped, m) })
	var unread *mapsError
	var late *mapsLate
	switch {
	case errors.As(err, &unread):
		unknown = append(unknown, fmt.Sprintf("%s (%v): its mappings are not known", MapsNotRead, unread.err))
	case errors.As(err, &late):
		unknown = append(unknown, fmt.Sprintf("mappings not read within %v%s", MapsWait, late.late.says(
			"/proc/PID/maps waits for the process's memory-map lock: a fault on a hung file system holds it")))
	}
	if ringMapped && len(rings) == 0 {
		unknown = append(unknown, RingsNotKnown+" mapped with no io_uring fd (the ring's fd closed, passed to another process, or registered with IORING_REGISTER_RING_FDS): the kernel lists a ring's registered files only in a ring fd's fdinfo")
	}
	return unknown
}

// ProcessHolds reports whether the process whose procfs directory is dir
// holds one of the wanted devices now through an fd, a mapping or an
// io_uring's registered files, as Scan reads them, and, when it holds
// none, what of its holds is not known (empty when everything is: the
// process holds none of them). A process that has exited holds nothing.
// It stops at the first hold it finds (an fd is read before the rings and
// the maps, which take up to RingWait and MapsWait), and at ctx's end:
// what it did not read by then is not known, and so is what it could not
// read (its fds or maps unreadable, the process not gone).
func ProcessHolds(ctx context.Context, dir string, want map[DevNum]bool) (holds bool, unknown []string) {
	// One hold answers: the reads after it are given up, as the reads
	// past ctx's end are (the ublk step's last resort checks a holder
	// with this just before its SIGKILL, inside its part of the reserve).
	rctx, found := context.WithCancel(ctx)
	defer found()
	mapped := newMapCache()
	unknown = processHolders(rctx, dir, want, &mapped, func(DevNum, string, string) { holds = true; found() })
	switch {
	case holds:
		return true, nil
	case ctx.Err() != nil:
		return false, []string{fmt.Sprintf("its fds, rings and mappings not all read before the check's end (%v)", ctx.Err())}
	}
	return false, unknown
}

// readStartTime reads when the process whose procfs directory is dir
// started (/proc/PID/stat's field 22), 0 when it cannot be read.
func readStartTime(dir string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	st, err := procstat.Parse(b)
	if err != nil {
		return 0
	}
	return st.StartTime
}

func readComm(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "comm"))
	return strings.TrimSpace(string(b))
}

// FDHolders calls found with "fd N -> PATH" for each open file of the
// process whose procfs directory is dir (/proc/PID) that is one of the
// wanted block devices.
func FDHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) {
	fdHolders(context.Background(), dir, want, found)
}

// noMemory reports whether the process whose procfs directory is dir has
// no memory map: a kernel thread, or a process whose exit has released it
// (its exe link is gone with it). It can map nothing, nor hold a ring
// through a mapping.
func noMemory(dir string) bool {
	_, err := os.Readlink(filepath.Join(dir, "exe"))
	return errors.Is(err, fs.ErrNotExist)
}

// fdsBetweenChecks is how many fds fdHolders reads between two looks at
// its context: one fd costs a readlink and a statx of procfs (a few
// microseconds), so a check reads at most some hundreds of microseconds
// past its end, and looking costs nothing against the reads.
const fdsBetweenChecks = 64

// ringLink is the target of an io_uring's fd in /proc/PID/fd.
const ringLink = "anon_inode:[io_uring]"

// fdHolders is FDHolders that also returns the process's io_uring fds
// (their numbers), whose registered files ringHolders reads, and how many
// fds it has (-1 when its fd directory could not be read). With found nil
// it only lists the rings, typing no file. It stops at ctx's end, looked
// at every fdsBetweenChecks fds (a VMM may have thousands): what it did
// not read then is the caller's to say (ctx.Err()).
func fdHolders(ctx context.Context, dir string, want map[DevNum]bool, found func(DevNum, string)) (rings []string, fds int, err error) {
	fdDir := filepath.Join(dir, "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, -1, err
	}
	var unread error // the first fd that could not be read, but not closed
	for i, e := range ents {
		if i%fdsBetweenChecks == 0 && ended(ctx) != nil {
			break
		}
		link := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(link)
		if err != nil {
			if !exited(err) && unread == nil {
				unread = err // its target is not known: it may be the disk
			}
			continue // ENOENT: closed since the listing
		}
		if isAnon(target) {
			if target == ringLink {
				rings = append(rings, e.Name())
			}
			continue // sockets, pipes and anon inodes are never block devices
		}
		if found == nil {
			continue
		}
		dev, ok, err := statBlockDev(link)
		if err != nil && !exited(err) && unread == nil {
			unread = err
		}
		if ok && want[dev] {
			found(dev, fmt.Sprintf("fd %s -> %s", e.Name(), target))
		}
	}
	return rings, len(ents), unread
}

// exited reports whether err, from reading a process's procfs files, says
// the process (or the fd) is gone: removed once it was reaped or closed
// (ENOENT), or reaped while the file was open (ESRCH). Any other error
// (EACCES, EMFILE, ENOMEM, EIO) says nothing of what the process holds.
func exited(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

func isAnon(target string) bool {
	return strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "pipe:") ||
		strings.HasPrefix(target, "anon_inode:")
}

// statBlockDev stats p (following links) and returns its device number
// if it is a block device; the error is nil when p was statted, even if it
// is not a block device. It asks only for the file's type, from the
// attributes the kernel has (AT_STATX_DONT_SYNC): a file's type and device
// number never change, and a plain stat of a file on a network or FUSE
// file system asks its server for fresh attributes, and waits for ever
// when the server is gone (an NFS volume whose server went away, a hung
// FUSE daemon), holding up the whole scan.
func statBlockDev(p string) (DevNum, bool, error) {
	return statDev(p, unix.S_IFBLK)
}

// statDev is statBlockDev for a device of the file type ifmt (S_IFBLK,
// S_IFCHR).
func statDev(p string, ifmt uint32) (DevNum, bool, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return DevNum{}, false, err
	}
	dev, ok := devOf(&st, ifmt)
	return dev, ok, nil
}

// devOf returns the device number st names if it is a device of the file
// type ifmt (S_IFBLK, S_IFCHR).
func devOf(st *unix.Statx_t, ifmt uint32) (DevNum, bool) {
	if st.Mask&unix.STATX_TYPE == 0 || uint32(st.Mode)&unix.S_IFMT != ifmt {
		return DevNum{}, false
	}
	return DevNum{st.Rdev_major, st.Rdev_minor}, true
}

// resolveCached is openat2's RESOLVE_CACHED (Linux 5.12; golang.org/x/sys
// does not name it yet): the lookup fails with EAGAIN unless every
// component is in the kernel's lookup cache and needs no revalidation.
const resolveCached = 0x20

// cachedBlockDev is blockDev for a path read from the kernel (a swap area,
// a loop's backing file, a mapped file): the path is resolved only from the
// kernel's lookup cache (openat2 RESOLVE_CACHED, O_PATH), because walking a
// path on a network or FUSE file system may revalidate a component with its
// server and wait for ever when the server is gone, AT_STATX_DONT_SYNC or
// not. A path that cannot be resolved so is an error (EAGAIN), and so is
// one that no longer exists.
func cachedBlockDev(p string) (DevNum, bool, error) {
	return cachedDevAt(unix.AT_FDCWD, p, 0, unix.S_IFBLK)
}

// cachedDevAt is cachedBlockDev for p resolved from the directory dirfd
// with the extra resolve flags, for a device of the file type ifmt
// (S_IFBLK, S_IFCHR).
func cachedDevAt(dirfd int, p string, resolve uint64, ifmt uint32) (DevNum, bool, error) {
	fd, err := unix.Openat2(dirfd, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: resolveCached | unix.RESOLVE_NO_MAGICLINKS | resolve,
	})
	if err != nil {
		return DevNum{}, false, err
	}
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st); err != nil {
		return DevNum{}, false, err
	}
	dev, ok := devOf(&st, ifmt)
	return dev, ok, nil
}

// mapCache remembers, for one scan, whether a mapped file (by the device
// and inode /proc/PID/maps shows) is a block device and which: the same
// libraries are mapped by every process, and each is statted once. buf is
// the line buffer every process's maps is read with.
type mapCache struct {
	files map[string]mapped
	buf   []byte
}

type mapped struct {
	dev   DevNum
	block bool
}

func newMapCache() *mapCache {
	return &mapCache{files: map[string]mapped{}, buf: make([]byte, 0, 16*1024)}
}

// MapsWait is the longest MapHolders waits for one process's mappings.
// Reading /proc/PID/maps (and map_files) takes the process's memory-map
// lock, which a thread faulting on a file of a hung FUSE or NFS mount
// holds for as long as that file system does not answer (and a writer
// queued behind it keeps every reader out): without a bound, the read
// would hold the ublk step past its deadline, and the daemon would be
// SIGKILLed with live devices. A process's maps normally read in well
// under a millisecond.
const MapsWait = 250 * time.Millisecond

// MapHolders calls found with "mmap START-END PATH" for each mapping of
// one of the wanted block devices in the process whose procfs directory is
// dir (/proc/PID), whether or not the process still has an fd open on the
// device: a mapping keeps the device in use, and its pages fail once the
// device is stopped. Adjacent mappings of the same file are reported as
// one. When the mappings are not read within MapsWait it returns an error
// and calls found for none (Scan's Detail says whether the kernel held the
// read or the machine was too busy to run it): the read goes on in a goroutine of its own
// until the kernel answers, then ends, and until then a read of the same
// maps waits for it (within) and starts no other. When they cannot be read (an error
// other than the process having exited) it returns the error, having
// called found for what it read before it. A mapping whose file it could
// type neither through map_files nor by its path is an error too, found
// called for every other mapping: what it maps is not known.
func MapHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) error {
	cache := newMapCache()
	_, err := boundedMapHolders(context.Background(), dir, want, &cache, found)
	return err
}

// boundedMapHolders is mapHolders waited for at most MapsWait, and not
// past ctx's end. A read given up on keeps *cache (a goroutine still uses
// it), and *cache is replaced by a new one for the rest of the scan. Its
// error is a *mapsLate (not read in time) or a *mapsError (mapHolders'
// error: not read, or a mapping not typed), never another: processHolders
// says each of the two as a Possible holder's Detail, and no other.
func boundedMapHolders(ctx context.Context, dir string, want map[DevNum]bool, cache **mapCache, found func(DevNum, string)) (ringMapped bool, err error) {
	c := *cache
	type result struct {
		hits       []holding
		ringMapped bool
		err        error
	}
	r, ok, late := within(ctx, filepath.Join(dir, "maps"), MapsWait, func() (r result) {
		r.ringMapped, r.err = mapHolders(dir, want, c, func(dev DevNum, m string) { r.hits = append(r.hits, holding{dev, m}) })
		return r
	})
	if !ok {
		*cache = newMapCache()
		return false, &mapsLate{fmt.Sprintf("ublk: holders: %s not read within %v", filepath.Join(dir, "maps"), MapsWait), late}
	}
	for _, h := range r.hits {
		found(h.dev, h.detail)
	}
	if r.err != nil {
		return r.ringMapped, &mapsError{r.err}
	}
	return r.ringMapped, nil
}

// mapsLate is a process's maps not read within MapsWait, and why.
type mapsLate struct {
	msg  string
	late lateCause
}

func (e *mapsLate) Error() string { return e.msg }

// mapsError is a process's maps that could not be read (not in time: an
// error of the read itself, EACCES or EMFILE, the process not gone).
type mapsError struct{ err error }

func (e *mapsError) Error() string { return "ublk: holders: " + e.err.Error() }
func (e *mapsError) Unwrap() error { return e.err }

// holding is one device a process holds, and how (a Holder's Detail).
type holding struct {
	dev    DevNum
	detail string
}

// within runs f in a goroutine of its own, on a thread of its own, and
// returns its result when it ends within d and before ctx ends; otherwise
// ok is false, f goes on until it ends by itself (a read of procfs waiting
// in the kernel), its result dropped, and late says why it was not done:
// what f's thread was doing when the bound passed. A bound in real time
// passes on a busy machine too (a load of 10 on 2 cores: reads that each
// take microseconds not all run within 100 ms), and only the thread's
// state tells a read the kernel holds from one that was slow to be run.
// When ctx has ended already, f does not start.
//
// file names what f reads (a process's maps, its rings' fdinfo, a mount
// namespace's mountinfo): while a read of file runs, given up on or not,
// f does not start; within waits for that read, in the same bound, and
// starts f when it has ended, or, when the bound passes first, is not ok,
// late being what that read's thread is doing. One thread at most waits
// in the kernel for a file, however many scans a stall outlasts. Before,
// each scan started a read of its own: a holder wait polling a stalled
// file every 100 ms left a thread asleep in the kernel each time
// (docs/faults.md row 3760).
func within[T any](ctx context.Context, file string, d time.Duration, f func() T) (result T, ok bool, late lateCause) {
	if ended(ctx) != nil {
		return result, false, notRun // not started: its reads would be dropped
	}
	wait := time.NewTimer(d)
	defer wait.Stop()
	read, earlier := reading.start(file)
	for earlier != nil {
		select {
		case <-earlier.done:
			read, earlier = reading.start(file)
			continue
		case <-wait.C:
		case <-ctx.Done():
		}
		return result, false, threadLate(int(earlier.tid.Load()))
	}
	done := make(chan T, 1)
	go func() {
		defer reading.end(file, read)
		// Locked, f's goroutine is the thread's alone: the thread asleep
		// in a system call is f's read waiting in the kernel.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		read.tid.Store(int32(unix.Gettid()))
		done <- f()
	}()
	select {
	case r := <-done:
		return r, true, 0
	case <-wait.C:
	case <-ctx.Done():
	}
	late = threadLate(int(read.tid.Load()))
	select {
	case r := <-done: // done as the bound passed
		return r, true, 0
	default:
		return result, false, late
	}
}

// reading is the bounded reads of this process that have not ended, by
// the file each reads. It is the package's because what it stands for
// is: a thread asleep in the kernel outlives the scan, the step and the
// caller that started its read, and only the next read of the same file,
// by whichever of them, can tell it is still there.
var reading = readsInFlight{reads: map[string]*boundedRead{}}

// readsInFlight is the bounded reads running, one at most a file.
type readsInFlight struct {
	mu    sync.Mutex
	reads map[string]*boundedRead
}

// boundedRead is one read within runs: done is closed when it has ended,
// tid is its thread's (0 until its goroutine runs).
type boundedRead struct {
	done chan struct{}
	tid  atomic.Int32
}

// start returns a new read of file, now the one in flight, or, when a
// read of file is in flight already, that read and no new one.
func (r *readsInFlight) start(file string) (read, earlier *boundedRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if earlier := r.reads[file]; earlier != nil {
		return nil, earlier
	}
	read = &boundedRead{done: make(chan struct{})}
	r.reads[file] = read
	return read, nil
}

// end says read of file has ended.
func (r *readsInFlight) end(file string, read *boundedRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reads, file)
	close(read.done)
}

// lateCause is why a bounded read was not done in time, as its thread's
// state said when the bound passed.
type lateCause int

const (
	// lateUnknown: the thread's state could not be read (a kernel
	// without /proc/PID/task/TID/syscall).
	lateUnknown lateCause = iota + 1
	// kernelWaited: the thread was asleep in a system call (or a page
	// fault): the kernel held the read, for a lock or a file system.
	kernelWaited
	// notRun: the thread was running, waiting for a CPU, or its
	// goroutine waiting for the Go scheduler, or not started: the reads
	// were slow to be run on a busy machine, the kernel did not hold them.
	notRun
)

// says is the cause of a read not done in time, in parentheses, for a
// Detail: waited, what the kernel waits for when it holds the read.
func (c lateCause) says(waited string) string {
	switch c {
	case kernelWaited:
		return " (" + waited + ")"
	case notRun:
		return " (not waiting in the kernel: the machine was too busy to run the reads in time)"
	}
	return ""
}

// threadLate reads what thread tid of this process is doing:
// /proc/self/task/TID/syscall is "running" for a task running or
// runnable, "-1 ..." for one asleep outside a system call, and the
// system call's number for one asleep in it; futex is the Go runtime's
// own sleep (a goroutine parked, in time.Sleep or waiting for a P).
func threadLate(tid int) lateCause {
	if tid == 0 {
		return notRun // its goroutine not yet run
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
	if err != nil {
		return lateUnknown
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if first == "running" {
		return notRun
	}
	n, err := strconv.Atoi(first)
	switch {
	case err != nil:
		return lateUnknown
	case n == unix.SYS_FUTEX:
		return notRun
	}
	return kernelWaited
}

// mapHolders is MapHolders unbounded, reading with cache; it also says
// whether the process has an io_uring mapped (its queues), which a ring
// whose fd was closed lives on by.
func mapHolders(dir string, want map[DevNum]bool, cache *mapCache, found func(DevNum, string)) (ringMapped bool, err error) {
	f, err := os.Open(filepath.Join(dir, "maps"))
	if exited(err) {
		return false, nil // gone: it maps nothing now
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	root := processRoot{dir: dir, fd: -1}
	defer root.close()
	type hit struct {
		key        string
		dev        DevNum
		start, end uint64
		path       string
	}
	var hits []hit
	var untyped error // the first mapping typed neither way
	sc := bufio.NewScanner(f)
	sc.Buffer(cache.buf, 1024*1024)
	for sc.Scan() {
		// 7f2c4a000000-7f2c4a100000 rw-s 00000000 00:05 1042    /dev/ublkb0
		line := sc.Bytes()
		addr, rest := nextField(line)
		_, rest = nextField(rest) // perms
		_, rest = nextField(rest) // offset
		keyStart := len(line) - len(bytes.TrimLeft(rest, " "))
		_, rest = nextField(rest) // device
		inode, rest := nextField(rest)
		if len(inode) == 0 || string(inode) == "0" {
			continue // anonymous memory, [heap], [stack], [vdso]
		}
		if bytes.HasSuffix(line, ringMapping) {
			ringMapped = true
			continue // the ring's queues, never a block device
		}
		key := line[keyStart : len(line)-len(rest)]
		m, seen := cache.files[string(key)]
		if !seen {
			start, end, ok := addrRange(addr)
			if !ok {
				continue
			}
			dev, block, typed, err := typeMapping(dir, &root, start, end, string(bytes.TrimLeft(rest, " ")), unix.S_IFBLK)
			if err != nil && untyped == nil {
				// Not typed is not "no block device": a VMM's disk node
				// in its own mount namespace, or unlinked, is not there
				// to resolve, and the mapping holds it.
				untyped = err
			}
			m = mapped{dev, block}
			if typed { // one unreadable now may be readable in another process
				cache.files[string(key)] = m
			}
		}
		if !m.block || !want[m.dev] {
			continue
		}
		start, end, ok := addrRange(addr)
		if !ok {
			continue
		}
		if n := len(hits); n > 0 && hits[n-1].key == string(key) && hits[n-1].end == start {
			hits[n-1].end = end
			continue
		}
		hits = append(hits, hit{string(key), m.dev, start, end, string(bytes.TrimLeft(rest, " "))})
	}
	for _, h := range hits {
		found(h.dev, fmt.Sprintf("mmap %x-%x %s", h.start, h.end, h.path))
	}
	if err := sc.Err(); err != nil && !exited(err) {
		return ringMapped, err // the lines after it are not known
	}
	return ringMapped, untyped
}

// typedByPath types a file a process maps, by the path maps shows, from
// the lookup cache only (cachedDevAt): as the process sees it first,
// resolved inside its own root (/proc/PID/root: its mount namespace and
// chroot, where a jailed or containerized VMM's disk node is, which maps
// shows by its path there when this process's root does not reach it),
// then as this process sees it (a jail in this mount namespace, which maps
// shows by its full path). It fails when neither resolves it, naming both
// errors. ifmt is the file type of the device looked for (S_IFBLK,
// S_IFCHR).
func typedByPath(root *processRoot, p string, ifmt uint32) (DevNum, bool, error) {
	fd, rerr := root.get()
	if rerr == nil {
		dev, block, err := cachedDevAt(fd, p, unix.RESOLVE_IN_ROOT, ifmt)
		if err == nil {
			return dev, block, nil
		}
		rerr = err
	}
	dev, block, err := cachedDevAt(unix.AT_FDCWD, p, 0, ifmt)
	if err != nil {
		return DevNum{}, false, fmt.Errorf("in its root: %w; in this process's: %w", rerr, err)
	}
	return dev, block, nil
}

// processRoot is a process's root directory (/proc/PID/root, dir its
// procfs directory), opened at the first mapping typedByPath types and
// closed by whoever made it: one open a process, not one a mapped file.
type processRoot struct {
	dir string
	fd  int // -1 until opened
	err error
}

// get returns the root's fd, or why it could not be opened.
func (r *processRoot) get() (int, error) {
	if r.fd < 0 && r.err == nil {
		r.fd, r.err = unix.Open(filepath.Join(r.dir, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if r.err != nil {
			r.fd = -1
		}
	}
	return r.fd, r.err
}

func (r *processRoot) close() {
	if r.fd >= 0 {
		unix.Close(r.fd)
	}
}

// typeMapping types the mapping start-end of path, in the process whose
// procfs directory is dir, as a device of the file type ifmt (S_IFBLK,
// S_IFCHR) or not one: by its map_files link, or, where that cannot be
// read here, by its path in the process's root (root), a path the kernel
// named (a memfd, an anon_inode) never being a node. typed says whether
// it was typed either way (a mapping gone since maps was read is not);
// err says why it was not when neither way could read it.
func typeMapping(dir string, root *processRoot, start, end uint64, path string, ifmt uint32) (dev DevNum, ok, typed bool, err error) {
	// map_files names the range without the zero padding maps has.
	dev, ok, err = statDev(filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", start, end)), ifmt)
	switch {
	case err == nil:
		return dev, ok, true, nil
	case errors.Is(err, unix.ENOENT):
		return DevNum{}, false, false, nil
	case kernelNamed(path):
		return DevNum{}, false, true, nil
	}
	if dev, ok, err = typedByPath(root, strings.TrimSuffix(path, " (deleted)"), ifmt); err != nil {
		return DevNum{}, false, false, fmt.Errorf("mapping of %s not typed (map_files, then its path: %w)", path, err)
	}
	return dev, ok, true, nil
}

// kernelNamed reports whether a maps path is one the kernel makes up for a
// file on an internal mount (a memfd's, a SysV shared memory segment's, an
// anon_inode's), which no lookup resolves and which is never a device
// node: VMMs map their guest's memory so, and were all possible holders
// without map_files.
func kernelNamed(path string) bool {
	if !strings.HasPrefix(path, "/") {
		return true // anon_inode:[perf_event], anon_inode:dmabuf
	}
	return strings.HasSuffix(path, " (deleted)") && (strings.HasPrefix(path, "/memfd:") || strings.HasPrefix(path, "/SYSV"))
}

// ringMapping ends the maps line of an io_uring's queues.
var ringMapping = []byte(" " + ringLink)

// addrRange parses a maps line's "START-END" (hexadecimal).
func addrRange(addr []byte) (start, end uint64, ok bool) {
	lo, hi, _ := bytes.Cut(addr, []byte("-"))
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	return start, end, err1 == nil && err2 == nil
}

// nextField returns b's first space-separated field and what follows it.
func nextField(b []byte) (field, rest []byte) {
	b = bytes.TrimLeft(b, " ")
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		return b[:i], b[i:]
	}
	return b, nil
}

// boundedMountHolders is mountHolders not waited for past ctx's
// deadline, by the clock as the scan's other reads (ended): a mount
// namespace so large that its mountinfo takes longer to read than the
// stage has (tens of thousands of mounts, a propagation storm), or a read
// that waits in the kernel (for the namespace's lock, which a mount
// stuck on a hung file system holds), held the scan, and the ublk step's
// stage with it, until the read ended (docs/faults.md row 3400). A read
// given up goes on in a goroutine of its own to its end, its result
// dropped; until then the reads of its namespace's mountinfo wait for it
// and start no other (within). Without a deadline it is waited for, as before. Its error is
// ctx's, by ended, when the read did not end in time.
//
// table is what the read reads, for within: the mount namespace's table,
// which every mountinfo of its processes is read from (mountTable).
func boundedMountHolders(ctx context.Context, mountinfo, table string, want map[DevNum]bool) ([]holding, error) {
	type result struct {
		hits []holding
		err  error
	}
	read := func() (r result) {
		r.err = mountHolders(ctx, mountinfo, want, func(dev DevNum, mp string) { r.hits = append(r.hits, holding{dev, mp}) })
		return r
	}
	end, ok := ctx.Deadline()
	if !ok {
		r := read()
		return r.hits, r.err
	}
	r, done, _ := within(ctx, table, time.Until(end), read)
	if !done {
		return nil, ended(ctx)
	}
	return r.hits, r.err
}

// mountTable names, for within, the mount table that the mountinfo of
// the process whose procfs directory is dir shows: its mount namespace
// ns, of procfs at procRoot, when ns is known, or that mountinfo alone.
// A read stalled on a namespace's lock stalls every one of its processes'
// mountinfo: one of them waiting, the others are not read again.
func mountTable(procRoot, dir, ns string) string {
	if ns == "" {
		return filepath.Join(dir, "mountinfo")
	}
	return procRoot + " " + ns
}

// mountLinesBetweenChecks is how many lines of a mountinfo mountHolders
// reads between two looks at its context: a line costs microseconds.
const mountLinesBetweenChecks = 256

// mountHolders calls found with the mount points whose file system is on
// a wanted device, and returns an error when mountinfo could not be read
// to its end (found was called for what was read before it): ctx's end
// (ended, looked at every mountLinesBetweenChecks lines) is one.
func mountHolders(ctx context.Context, mountinfo string, want map[DevNum]bool, found func(DevNum, string)) error {
	f, err := os.Open(mountinfo)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		if n%mountLinesBetweenChecks == 0 {
			if err := ended(ctx); err != nil {
				return err
			}
		}
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		dev, err := ParseDevNum(fields[2])
		if err != nil {
			continue
		}
		if !want[dev] && dev.Major == 0 {
			dev = sourceDev(fields)
		}
		if want[dev] {
			found(dev, unescapeOctal(fields[4]))
		}
		for _, o := range otherDevices(fields) {
			if want[o.dev] {
				found(o.dev, fmt.Sprintf("%s (its %s: %s=%s)", unescapeOctal(fields[4]), o.what, o.key, o.path))
			}
		}
	}
	return sc.Err()
}

// deviceOptions are the super options by which a file system names a
// device of its own beyond the one it is mounted from: xfs's external log
// and realtime device (mkfs.xfs -l logdev=, -r rtdev=). The file system
// holds them in the kernel while it lives, and mountinfo names them only
// there.
var deviceOptions = map[string]string{"logdev": "log", "rtdev": "realtime device"}

// optionDevice is a device a mount's super options name.
type optionDevice struct {
	key, what, path string
	dev             DevNum
}

// otherDevices returns the devices a mountinfo line's super options (the
// field after the source) name (deviceOptions), their paths resolved from
// the lookup cache only, as every path the kernel reports
// (cachedBlockDev); one that does not resolve so is left out.
func otherDevices(fields []string) []optionDevice {
	sep := slices.Index(fields[min(6, len(fields)):], "-")
	if sep < 0 {
		return nil
	}
	i := min(6, len(fields)) + sep + 3 // "-", the type, the source, the super options
	if i >= len(fields) || !strings.Contains(fields[i], "dev=") {
		return nil
	}
	var out []optionDevice
	for _, opt := range strings.Split(fields[i], ",") {
		key, val, ok := strings.Cut(opt, "=")
		what := deviceOptions[key]
		if !ok || what == "" {
			continue
		}
		p := unescapeOctal(val)
		if dev, block, _ := cachedBlockDev(p); block {
			out = append(out, optionDevice{key, what, p, dev})
		}
	}
	return out
}

// sourceDev is the block device a mountinfo line's mount source names
// (the field after the file system type), or the zero DevNum. It is read
// only for a mount whose device number is an anonymous one (major 0):
// btrfs gives each of its mounts such a number, not its disk's, and names
// the disk only as the source; tmpfs, overlay or proc have a source that
// is no path. The path is resolved from the lookup cache only, as every
// path the kernel reports (cachedBlockDev).
func sourceDev(fields []string) DevNum {
	sep := slices.Index(fields[min(6, len(fields)):], "-") // after the optional fields
	if sep < 0 {
		return DevNum{}
	}
	i := min(6, len(fields)) + sep + 2 // "-", the type, the source
	if i >= len(fields) || !strings.HasPrefix(fields[i], "/") {
		return DevNum{}
	}
	if dev, ok, _ := cachedBlockDev(unescapeOctal(fields[i])); ok {
		return dev
	}
	return DevNum{}
}

// swapHolders calls found with the swap areas on a wanted device, and
// returns those on a block device (Type "partition") whose path does not
// resolve from the lookup cache, each as "PATH does not resolve (ERROR)":
// the kernel names the node swapon was given, which may have been removed
// since (" (deleted)": a container's /dev gone) or be another mount
// namespace's, so which device it is is not known. A swap file whose path
// does not resolve is on a file system, which holds its own disk.
func swapHolders(swaps string, want map[DevNum]bool, found func(DevNum, string)) (unresolved []string) {
	b, err := os.ReadFile(swaps)
	if err != nil { // no swap support, or not readable: nothing to report
		return nil
	}
	for i, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if i == 0 || len(fields) == 0 {
			continue // header: Filename Type Size Used Priority
		}
		name := unescapeOctal(fields[0])
		dev, ok, err := cachedBlockDev(strings.TrimSuffix(name, " (deleted)"))
		switch {
		case err != nil && len(fields) > 1 && fields[1] == "partition":
			unresolved = append(unresolved, fmt.Sprintf("%s does not resolve (%v)", name, err))
		case ok && want[dev]:
			found(dev, name)
		}
	}
	return unresolved
}

// unescapeOctal undoes the kernel's \040-style escaping in mountinfo and
// swaps.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
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

// StackHolders lists the holders/ directories (device-mapper, md) of the
// disk name and of its partitions parts under sysRoot. A directory that
// cannot be listed (EMFILE or ENOMEM in the server) is named in the error
// with the cause, one error per directory (errors.Join), and what the
// others list is returned all the same: a caller that took the devices
// stacked there for none had the disk stopped under them. A holders/
// directory that does not exist (the device gone) lists nothing, and no
// error.
func StackHolders(sysRoot, name string, parts []Partition) ([]Holder, error) {
	diskDir := filepath.Join(sysRoot, blockDir, name)
	dirs := []string{diskDir}
	names := []string{name}
	for _, p := range parts {
		dirs = append(dirs, filepath.Join(diskDir, p.Name))
		names = append(names, p.Name)
	}
	var out []Holder
	var errs []error
	for i, dir := range dirs {
		ents, err := os.ReadDir(filepath.Join(dir, "holders"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("ublk: devices stacked on %s not listed: %w", names[i], err))
		}
		for _, e := range ents { // those listed before a failure too
			out = append(out, Holder{Kind: Stacked, Detail: e.Name()})
		}
	}
	return out, errors.Join(errs...)
}

// LoopHolders returns, for each of devs, the loop devices under sysRoot
// whose backing file is that device (losetup /dev/loopN /dev/ublkb0): the
// loop driver holds it in the kernel, with no process and no open fd, so
// the procfs scan cannot see it, and stopping the device fails the loop's
// I/O. A backing file is matched by its device number (statx's rdev: a
// node can be reached through other paths than /dev), its path resolved
// only from the kernel's lookup cache; one that cannot be resolved so (a
// file system that would have to be asked, a path of another mount
// namespace) is matched by its name against the devices' kernel names
// (sysfs dev/block/MAJ:MIN), and Detail says so.
//
// What it could not read is named in the error with the cause (one error
// each, errors.Join), with the loop devices it did find: sysfs's block/
// not listed, or a loop device's backing file not read (EMFILE or ENOMEM
// in the server; a device with no backing file, or no loop device at all,
// has none to read, and is no error). A caller that took a loop device
// not read for none had the disk stopped under it, failing its I/O. It
// reads nothing more once ctx has ended, by the clock (its stage's end),
// saying so in the error; before, on a loaded node, these reads ran
// past the stage (docs/faults.md row 3601). before, when not nil, is
// called with each path before it is read (a test's slow sysfs).
func LoopHolders(ctx context.Context, sysRoot string, devs []DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	want := wantSet(devs)
	var names map[string]DevNum // kernel name -> number, read when needed
	out := map[DevNum][]Holder{}
	var errs []error
	ents, err := os.ReadDir(hooked(before, filepath.Join(sysRoot, blockDir)))
	if err != nil {
		errs = append(errs, fmt.Errorf("ublk: loop devices not listed: %w", err))
	}
	for _, e := range ents { // those listed before a failure too
		if err := ended(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ublk: loop devices not all read by the stage's end: %w", err))
			break
		}
		b, err := os.ReadFile(hooked(before, filepath.Join(sysRoot, blockDir, e.Name(), "loop", "backing_file")))
		if errors.Is(err, fs.ErrNotExist) {
			continue // not a loop device, or one with no backing file
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("ublk: loop device %s's backing file not read: %w", e.Name(), err))
			continue
		}
		backing := strings.TrimSuffix(string(b), "\n")
		p := strings.TrimSuffix(backing, " (deleted)")
		if p == "" {
			continue
		}
		dev, block, err := cachedBlockDev(p)
		how := ""
		if err != nil {
			if names == nil {
				names = kernelNames(sysRoot, devs)
			}
			dev, block = names[filepath.Base(p)]
			how = fmt.Sprintf("; matched by name, the path not resolvable without asking its file system: %v", err)
		}
		if block && want[dev] {
			out[dev] = append(out[dev], Holder{Kind: Loop, Detail: fmt.Sprintf("%s (backing file %s%s)", e.Name(), backing, how)})
		}
	}
	return out, errors.Join(errs...)
}

// fsDirs are the file systems that make a directory of sysfs's fs/TYPE
// for each instance, named after the block device it lives on (the
// superblock's s_id), from the mount until the kernel frees it. ext4
// serves ext2 and ext3 too.
var fsDirs = []string{"ext4", "xfs", "f2fs", "erofs", "nilfs2"}

// FileSystemHolders returns, for each device of devs (by kernel name:
// ublkb0, ublkb0p1), the file systems alive on it that sysfs under
// sysRoot shows (Holder.Kind FileSystem): the directory fs/TYPE/NAME of
// ext4 (ext2, ext3), xfs, f2fs, erofs and nilfs2, and btrfs's
// fs/btrfs/FSID/devices/NAME, one for each device of the file system.
// They live from the mount until the kernel frees the file system, so they
// show what no mountinfo does: a file system unmounted lazily (umount -l)
// and still in use by an open file, whose I/O fails once the device is
// stopped, and one mounted only in a mount namespace the scan could not
// read. Other file systems (vfat, exfat) are known through mountinfo
// only.
//
// A directory it could not look for (EMFILE or ENOMEM in the server; one
// that does not exist is no file system, and no error) is named in the
// error with the cause (one error each, errors.Join), with the file
// systems it did find: a caller that took one not looked for for none had
// the disk stopped under it, failing its I/O. ctx and before are as
// LoopHolders'.
func FileSystemHolders(ctx context.Context, sysRoot string, devs map[string]DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	names := slices.Sorted(maps.Keys(devs))
	out := map[DevNum][]Holder{}
	var errs []error
	var cut error
	found := func(name, fsys, rel string) {
		if cut != nil {
			return
		}
		if cut = ended(ctx); cut != nil {
			errs = append(errs, fmt.Errorf("ublk: file systems not all looked for by the stage's end: %w", cut))
			return
		}
		_, err := os.Lstat(hooked(before, filepath.Join(sysRoot, rel)))
		switch {
		case err == nil:
			dev := devs[name]
			out[dev] = append(out[dev], Holder{Kind: FileSystem, Detail: fmt.Sprintf("%s on %s (sysfs %s)", fsys, name, rel)})
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("ublk: file system %s not looked for: %w", rel, err))
		}
	}
	for _, fsys := range fsDirs {
		for _, name := range names {
			found(name, fsys, filepath.Join("fs", fsys, name))
		}
	}
	if cut != nil {
		return out, errors.Join(errs...)
	}
	btrfs, err := os.ReadDir(hooked(before, filepath.Join(sysRoot, "fs", "btrfs")))
	if err != nil && !errors.Is(err, fs.ErrNotExist) { // none: btrfs not loaded
		errs = append(errs, fmt.Errorf("ublk: btrfs file systems not listed: %w", err))
	}
	for _, e := range btrfs {
		for _, name := range names {
			found(name, "btrfs "+e.Name(), filepath.Join("fs", "btrfs", e.Name(), "devices", name))
		}
	}
	return out, errors.Join(errs...)
}

// JournalHolders returns, for each device of devs (by kernel name:
// ublkb0, ublkb0p1), the jbd2 journal on it that procfs under procRoot
// shows (Holder.Kind FileSystem): the directory fs/jbd2/NAME, which the
// kernel makes for a journal on a device of its own (an ext4 or ocfs2
// file system's external journal: mke2fs -J device=) from the file
// system's mount until the kernel frees it. Such a file system holds the
// device in the kernel though no mountinfo names it (the file system's
// own device is mounted), no sysfs holders/ lists it and it has no fs/TYPE
// directory of its own: stopped under it, the journal's writes fail and
// the file system aborts. A journal inside its file system's device is
// fs/jbd2/NAME-INODE, and that device's file system FileSystemHolders
// finds.
//
// A directory it could not look for (EMFILE or ENOMEM in the server; one
// that does not exist is no journal, and no error) is named in the error
// with the cause (one error each, errors.Join), with the journals it did
// find. ctx and before are as LoopHolders'.
func JournalHolders(ctx context.Context, procRoot string, devs map[string]DevNum, before func(path string)) (map[DevNum][]Holder, error) {
	out := map[DevNum][]Holder{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		if err := ended(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ublk: jbd2 journals not all looked for by the stage's end: %w", err))
			break
		}
		// jbd2 names a journal after its device, '/' made '!'.
		rel := filepath.Join("fs", "jbd2", strings.ReplaceAll(name, "/", "!"))
		_, err := os.Stat(hooked(before, filepath.Join(procRoot, rel)))
		switch {
		case err == nil:
			dev := devs[name]
			out[dev] = append(out[dev], Holder{Kind: FileSystem,
				Detail: fmt.Sprintf("jbd2 journal on %s (procfs %s): an ext4 or ocfs2 file system's, on another device", name, rel)})
		case !errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("ublk: jbd2 journal %s not looked for: %w", rel, err))
		}
	}
	return out, errors.Join(errs...)
}

// hooked calls before (a test's, when not nil) with path, which its
// caller reads next, and returns path.
func hooked(before func(path string), path string) string {
	if before != nil {
		before(path)
	}
	return path
}

// kernelNames maps the kernel names of devs (sysfs dev/block/MAJ:MIN is a
// link to the device's directory) to their numbers.
func kernelNames(sysRoot string, devs []DevNum) map[string]DevNum {
	m := make(map[string]DevNum, len(devs))
	for _, d := range devs {
		if target, err := os.Readlink(filepath.Join(sysRoot, "dev", blockDir, d.String())); err == nil {
			m[filepath.Base(target)] = d
		}
	}
	return m
}

// wantSet is devs as a set.
func wantSet(devs []DevNum) map[DevNum]bool {
	want := make(map[DevNum]bool, len(devs))
	for _, d := range devs {
		want[d] = true
	}
	return want
}
