//go:build linux

package blockdev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// CharHolders returns, for each of devs (character device numbers), the
// processes under procRoot that have the device open, each once: a ublk
// server has its devices' /dev/ublkcN open while it serves them, and the
// driver lets only one process open each. Only fds are read (a character
// device cannot be mounted, and a ublk server's mapping of its char device
// comes with its fd), each typed from the attributes the kernel has, as
// Holders does. It also returns, with why, the processes whose fds it
// could not read though they had not exited (EACCES: another user's
// process, or a non-dumpable one, to a reader without CAP_SYS_PTRACE;
// EMFILE in the reader): any of them may have a device open, so a device
// with no holder listed is not one no process has open. A process that
// exited has none. When ctx ends before every process was read it returns
// what it found and a *CutError.
func CharHolders(ctx context.Context, procRoot string, devs []DevNum) (held map[DevNum][]int, unread map[int]error, err error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("ublk: char device holders: %w", err)
	}
	want := wantSet(devs)
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	held, unread = map[DevNum][]int{}, map[int]error{}
	for i, pid := range pids {
		if err := ctx.Err(); err != nil {
			return held, unread, &CutError{Unread: pids[i:], Total: len(pids), Err: err}
		}
		open, complete, err := ReadCharsOpen(ctx, filepath.Join(procRoot, strconv.Itoa(pid), "fd"), want)
		if !complete {
			return held, unread, &CutError{Unread: pids[i:], Total: len(pids), Err: ctx.Err()}
		}
		if err != nil && !exited(err) {
			unread[pid] = err
		}
		for _, dev := range open {
			held[dev] = append(held[dev], pid)
		}
	}
	return held, unread, nil
}

// CharsOpen returns the character devices of want that the process whose
// fd directory is fdDir (/proc/PID/fd) has open, each once, in the order
// of its fds, each typed from the attributes the kernel has, and whether
// it read every fd: it stops when ctx ends, looked at every 64 fds. A
// directory that cannot be read (the process exited, EACCES) has none.
func CharsOpen(ctx context.Context, fdDir string, want map[DevNum]bool) (open []DevNum, complete bool) {
	open, complete, _ = ReadCharsOpen(ctx, fdDir, want)
	return open, complete
}

// ReadCharsOpen is CharsOpen that also returns why fdDir could not be
// read (EMFILE, EACCES; fs.ErrNotExist when the process exited), for a
// caller to whom a process it cannot read is not one with none open: it
// then has none and complete.
func ReadCharsOpen(ctx context.Context, fdDir string, want map[DevNum]bool) (open []DevNum, complete bool, err error) {
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, true, err
	}
	for i, fd := range fds {
		if i%64 == 0 && ctx.Err() != nil {
			return open, false, nil
		}
		link := filepath.Join(fdDir, fd.Name())
		if target, err := os.Readlink(link); err != nil || isAnon(target) {
			continue
		}
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, link, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st) != nil ||
			st.Mask&unix.STATX_TYPE == 0 || uint32(st.Mode)&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		if dev := (DevNum{st.Rdev_major, st.Rdev_minor}); want[dev] && !slices.Contains(open, dev) {
			open = append(open, dev)
		}
	}
	return open, true, nil
}
