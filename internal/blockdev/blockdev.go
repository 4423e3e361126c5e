package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// blockDir is where sysfs lists block devices, relative to its root.
const blockDir = "block"

// DevNum is a device number, as in /sys/block/NAME/dev ("259:3").
type DevNum struct{ Major, Minor uint32 }

// String returns "MAJOR:MINOR".
func (d DevNum) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// ParseDevNum parses "MAJOR:MINOR" (surrounding white space allowed).
func ParseDevNum(s string) (DevNum, error) {
	maj, min, ok := strings.Cut(strings.TrimSpace(s), ":")
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return DevNum{}, fmt.Errorf("ublk: bad device number %q", s)
	}
	return DevNum{uint32(a), uint32(b)}, nil
}

// ReadDevNum reads the device number of block device name (for example
// "loop3" or "ublkb0") from sysRoot/block/NAME/dev.
func ReadDevNum(sysRoot, name string) (DevNum, error) {
	b, err := os.ReadFile(filepath.Join(sysRoot, blockDir, name, "dev"))
	if err != nil {
		return DevNum{}, err
	}
	return ParseDevNum(string(b))
}

// CutError is the error of a scan whose ctx ended before it had read every
// process: what those hold is not known. The scan of one process stops
// at ctx's end too, its bounded reads included (MapsWait, RingWait), and
// that process is then one not read, though what it was found to hold is
// reported.
type CutError struct {
	// Unread are the PIDs of the processes not read, Total the number of
	// processes procfs listed.
	Unread []int
	Total  int
	// Err is ctx.Err().
	Err error
}

// Error says how many of the processes procfs listed were not read, and why.
func (e *CutError) Error() string {
	return fmt.Sprintf("ublk: holders: %d of %d processes not read: %v", len(e.Unread), e.Total, e.Err)
}

// Unwrap returns Err, so that errors.Is finds ctx's context.DeadlineExceeded
// or context.Canceled.
func (e *CutError) Unwrap() error { return e.Err }

// Partition is one partition of a disk (sysfs block/DISK/DISKpN).
type Partition struct {
	Name string
	Dev  DevNum
}

// Partitions lists the partitions of disk under sysRoot, which a VMM may
// hold open instead of the whole disk, and says which it could not read.
// A partition whose number cannot be read (its dev file unreadable, EMFILE
// or ENOMEM in the server, or not a device number) is left out of the
// list, and the error names it and the cause, one error per partition
// (errors.Join); the partitions read are listed all the same, so a caller
// still scans those. A caller that matches holders by number does not
// know what holds a partition left out: taken for one nothing holds, it
// had a disk stopped under a VMM or a mount of that partition. A disk
// directory that cannot be listed gives no partition and an error wrapping
// the cause (fs.ErrNotExist when sysfs does not list the disk: gone).
func Partitions(sysRoot, disk string) ([]Partition, error) {
	dir := filepath.Join(sysRoot, blockDir, disk)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ublk: partitions of %s: %w", disk, err)
	}
	var out []Partition
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), disk+"p") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "dev"))
		var dev DevNum
		if err == nil {
			dev, err = ParseDevNum(string(b))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("ublk: partition %s of %s: device number not read: %w", e.Name(), disk, err))
			continue
		}
		out = append(out, Partition{e.Name(), dev})
	}
	return out, errors.Join(errs...)
}

// How a holder keeps a block device busy: Holder.Kind.
const (
	// FD: a process has the device node open (a VMM's disk).
	FD = "fd"
	// Mount: a file system on the device is mounted in a mount namespace,
	// or one mounted there names the device as its log or realtime device
	// (xfs's logdev=, rtdev=: Holder.Detail says so after the mount
	// point); Holder.PID is one process in that namespace.
	Mount = "mount"
	// Swap: the device is active swap.
	Swap = "swap"
	// Stacked: another block device (device-mapper, md) is stacked on it
	// (sysfs holders/).
	Stacked = "stacked"
	// Loop: a loop device's backing file is the device (losetup
	// /dev/loopN /dev/ublkb0): the loop driver holds it in the kernel, with
	// no process and no open fd; Holder.Detail names the loop device.
	// Kernel state, like Stacked: killing a process does not release it.
	Loop = "loop"
	// FileSystem: a file system on the device is alive in the kernel, as
	// sysfs shows it (FileSystemHolders), where no mountinfo the scan
	// read shows it: unmounted lazily (umount -l) and still in use by an
	// open file, or mounted only in a mount namespace the scan could not
	// read. Holder.Detail names the file system and its sysfs directory.
	// Kernel state, like Mount: no kill of a process the scan knows
	// releases it.
	FileSystem = "filesystem"
	// Mapped: a process has the device node memory-mapped
	// (/proc/PID/maps), whether or not it still has an fd open on it;
	// Holder.Detail is the address range and the mapped path. A process,
	// like FD: its exit releases the mapping.
	Mapped = "mapped"
	// Ring: a process has the device node among an io_uring's registered
	// files (IORING_REGISTER_FILES, as fio's registerfiles, SPDK and QEMU's
	// io_uring do), whether or not it still has an fd open on it: the ring
	// holds the file, and the process's fds show only the ring
	// (anon_inode:[io_uring]). Holder.Detail is the ring's fd, the slot and
	// the file's path. A process, like FD: its exit releases the ring.
	Ring = "ring"
	// Possible: a process part of whose holds the kernel did not show (its
	// mappings not read within MapsWait, a ring's registered files not
	// listed within RingWait, a ring it has mapped with no ring fd to
	// list them by, or its fds or maps not readable: see NotRead): it may
	// hold the device through them, or not.
	// Holder.Detail says what is not known and why. A process, like FD:
	// its exit releases whatever it holds. Scan lists it for every device
	// it scans.
	Possible = "possible"
)

// Holder is one user of a block device. Its fields are those of
// ublk.Holder, which converts from it.
type Holder struct {
	// PID is the holding process, 0 for swap, stacked and loop devices
	// and file systems.
	PID int `json:"pid,omitempty"`
	// Comm is the process's command name (/proc/PID/comm).
	Comm string `json:"comm,omitempty"`
	// StartTime is when the process started, /proc/PID/stat's field 22
	// (clock ticks after boot), read once per process a scan lists; zero
	// when it could not be read, and for holders with no process. With
	// the PID, which the kernel gives to another process once this one is
	// reaped, it names the process: two holders at one PID with different
	// start times are two processes.
	StartTime uint64 `json:"start_time,omitempty"`
	// Kind says how the device is held: FD, Mount, Swap, Stacked, Loop,
	// FileSystem, Mapped or Ring; Possible when it may be held, the scan could not
	// tell.
	Kind string `json:"kind"`
	// Detail is the fd and path, the mount point, the swap file, the
	// stacked device's name, the loop device and its backing file, the
	// file system and its sysfs directory, the mapping's address range
	// and path, the ring's fd, slot and path, or, for a Possible holder,
	// what of the process is not known and why.
	Detail string `json:"detail"`
}

// The start of a Possible holder's Detail when a process's own procfs
// files could not be read (and it had not exited): FDsNotRead for
// /proc/PID/fd (then its rings are not known either), MapsNotRead for
// /proc/PID/maps, MountsNotRead for the mountinfo of its mount namespace
// (no process of the namespace let the scan read it). The error follows in
// parentheses. RingsNotKnown starts one when its rings' registered files
// are not known: a ring's fdinfo not read, or not listing them in time (a
// busy ring holds its lock), or a ring mapped with no fd to read it by.
// SwapNotKnown starts that of a Possible holder with no PID: swap on a
// block device whose path in /proc/swaps does not resolve.
const (
	FDsNotRead    = "fds not read"
	SwapNotKnown  = "swap on a block device not known"
	MapsNotRead   = "mappings not read"
	MountsNotRead = "mounts not read"
	RingsNotKnown = "io_uring"
)

// Unread is what a scan could not read of a Possible holder (NotRead):
// what a scan before found it hold through that is not contradicted.
type Unread struct {
	FDs    bool // its fds, and so its rings
	Maps   bool // its mappings
	Rings  bool // its rings' registered files
	Mounts bool // its mount namespace's mounts
}

// Hides reports whether a hold of kind (FD, Ring, Mapped, Mount) would
// have been found only through what the scan could not read: one the scan
// before found stands. A ring's files are listed through its fd, so fds
// not read hide rings too.
func (u Unread) Hides(kind string) bool {
	switch kind {
	case FD:
		return u.FDs
	case Ring:
		return u.FDs || u.Rings
	case Mapped:
		return u.Maps
	case Mount:
		return u.Mounts
	}
	return false
}

// NotRead reports what of h, a Possible holder, a scan could not read;
// nothing for any other holder.
func NotRead(h Holder) Unread {
	if h.Kind != Possible {
		return Unread{}
	}
	return Unread{
		FDs:    strings.HasPrefix(h.Detail, FDsNotRead+" ("),
		Maps:   strings.HasPrefix(h.Detail, MapsNotRead+" ("),
		Rings:  strings.HasPrefix(h.Detail, RingsNotKnown+" "),
		Mounts: strings.HasPrefix(h.Detail, MountsNotRead+" ("),
	}
}
