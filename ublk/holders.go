package ublk

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// Holder is one user of a block device: a process with the disk open,
// memory-mapped or among an io_uring's registered files, a mount of a file
// system on it, a file system alive on it and mounted nowhere the scan
// read, swap on it, a device stacked on it, a loop device backed by it, or
// a process that may hold it (a possible holder: the kernel did not
// show part of what it holds).
type Holder struct {
	// PID is the holding process, 0 for swap, stacked and loop devices,
	// file systems, and for the possible holder that stands for the
	// processes a holders scan did not read in time, or for those of a
	// disk whose device number it could not read.
	PID int `json:"pid,omitempty"`
	// Comm is the process's command name (/proc/PID/comm).
	Comm string `json:"comm,omitempty"`
	// StartTime is when the process started, /proc/PID/stat's field 22
	// (clock ticks after boot), as the holders scan read it; zero when
	// not read, and for holders with no process. With the PID it names
	// the process: the kernel gives a PID to another process once its
	// process is reaped, and two holders at one PID with different start
	// times are two processes.
	StartTime uint64 `json:"start_time,omitempty"`
	// Kind says how the device is held: "fd" (a process has the device
	// node open, a VMM's disk), "mapped" (a process has the device node
	// memory-mapped, fd closed or not: a process like "fd", waited for and,
	// at the last resort, killed when doomed), "ring" (a process has the
	// device node among an io_uring's registered files, fd closed or not,
	// as QEMU's io_uring, SPDK and fio's registerfiles do: a process like
	// "fd"), "mount" (a file system on it
	// is mounted in a mount namespace; PID is one process in that
	// namespace), "swap" (it is active swap), "stacked" (device-mapper or
	// md is stacked on it), "loop" (a loop device's backing file is the
	// disk: kernel state with no process, never released by a kill; detach
	// it with losetup -d), "filesystem" (a file system on it is alive in
	// the kernel, as sysfs shows it, where no mountinfo the scan read
	// does: unmounted lazily and still in use by an open file, or mounted
	// only in a mount namespace not read; kernel state like "loop"), or
	// "possible" (a process whose mappings or
	// io_uring registered files the kernel did not show in time, whose fds
	// or mappings could not be read (EACCES, EMFILE), or with
	// a ring mapped and no ring fd to list them by: it may hold the disk
	// through them, and counts as a holder until a scan knows better; a
	// process like "fd"; with PID 0, the processes a holders scan did not
	// read before the end of the last resort's part of the reserve, or
	// whatever holds a disk whose device number sysfs did not give, the
	// last scan's holders of it standing, which nothing kills).
	Kind string `json:"kind"`
	// Detail is the fd and path, the mapping's address range and path
	// ("mmap 7f..-7f.. /dev/ublkb0"), the ring's fd, slot and path
	// ("io_uring fd 7 slot 0 -> /dev/ublkb0"), the mount point, the swap file, the
	// stacked device's name, the loop device and its backing file
	// ("loop3 (backing file /dev/ublkb0)"), the file system and its sysfs
	// directory ("ext4 on ublkb0 (sysfs fs/ext4/ublkb0)"), or what of a possible holder
	// is not known and why ("io_uring fd 7: the registered files not
	// listed by the kernel in 4 reads within 100ms ...").
	Detail string `json:"detail"`
}

// String describes the holder in one line, for logs and errors.
func (h Holder) String() string {
	if h.PID == 0 {
		return fmt.Sprintf("%s %s", h.Kind, h.Detail)
	}
	return fmt.Sprintf("pid %d (%s) %s %s", h.PID, h.Comm, h.Kind, h.Detail)
}

// holders converts the holders blockdev found.
func holders(hs []blockdev.Holder) []Holder {
	if hs == nil {
		return nil
	}
	out := make([]Holder, len(hs))
	for i, h := range hs {
		out[i] = Holder(h)
	}
	return out
}
