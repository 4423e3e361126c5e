// Package blockdev reads what package ublk needs to know about block
// devices: their numbers (sysfs block/NAME/dev), their partitions, and who
// holds them open: processes with the device node open (/proc/PID/fd),
// processes with the device node memory-mapped, fd closed or not
// (/proc/PID/maps), processes with it among an io_uring's registered files,
// fd closed or not (the ring's /proc/PID/fdinfo), mounts of a file system on
// them (/proc/PID/mountinfo,
// once per mount namespace), swap on them (/proc/swaps), devices stacked on
// them (sysfs holders/), loop devices backed by them (sysfs
// block/loopN/loop/backing_file), file systems alive on them (sysfs
// fs/TYPE/NAME) and file systems' journals on them (procfs fs/jbd2/NAME).
// It works for any block device, loop and ublk alike.
//
// No scan stats a path that could wait on a file system's server (a hung
// FUSE daemon, an NFS server gone): open and mapped files are typed through
// their /proc magic links with statx(AT_STATX_DONT_SYNC), and a path read
// from the kernel (a loop's backing file, a mapping's path when
// /proc/PID/map_files is not readable, a ring's registered file) is resolved
// only from the kernel's lookup cache (openat2 RESOLVE_CACHED), never asking
// a file system. Reads that wait in the kernel for a process's lock (its
// memory map, its ring) are bounded (MapsWait, RingWait): the scan goes on
// without what they would have said and lists the process as a Possible
// holder, saying what of it is not known; the caller scans again to know.
// A scan stops at its context's end, those reads included, and says which
// processes it did not read (CutError). A process with no fd and no memory
// map (a kernel thread) is not read past its fds: it can hold nothing. A
// process whose fds or maps cannot be read (EACCES, EMFILE; not one that
// exited) is a Possible holder naming the error, never one that holds
// nothing.
//
// Linux only: elsewhere the scans fail with an error wrapping
// errors.ErrUnsupported.
package blockdev
