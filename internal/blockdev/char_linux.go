//go:build linux

package blockdev

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// CharHolders returns, for each of devs (character device numbers), the
// processes under procRoot that have the device open or mapped, each
// once: a ublk server has its devices' /dev/ublkcN open, or mapped (the I/O
// descriptors) with its fd closed, while it serves them, and the driver
// lets only one process open each. Fds and mappings are read
// (ReadCharsHeld; a character device cannot be mounted), each typed from
// the attributes the kernel has, as Holders does. Read fds alone, a
// per-device server that closed its fd held nothing, and the step's own
// device was taken for another server's (row 2080). It also returns, with
// why, the processes whose fds or mappings it could not read though they
// had not exited (EACCES: another user's process, or a non-dumpable one,
// to a reader without CAP_SYS_PTRACE; EMFILE in the reader; maps not read
// within MapsWait; a mapping not typed): any of them may have a device
// open, so a device with no holder listed is not one no process has open.
// A process that exited has none. When ctx ends before every process was
// read it returns what it found and a *CutError.
func CharHolders(ctx context.Context, procRoot string, devs []DevNum) (held map[DevNum][]int, unread map[int]error, err error) {
	return CharHoldersWithHook(ctx, procRoot, devs, nil)
}

// CharHoldersWithHook is CharHolders that calls before, when not nil (a
// test's slow procfs), with each process directory before it reads it.
func CharHoldersWithHook(ctx context.Context, procRoot string, devs []DevNum, before func(dir string)) (held map[DevNum][]int, unread map[int]error, err error) {
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
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		if before != nil {
			before(dir)
			if ctx.Err() != nil {
				return held, unread, &CutError{Unread: pids[i:], Total: len(pids), Err: ctx.Err()}
			}
		}
		open, mapped, complete, err := ReadCharsHeld(ctx, dir, want)
		if !complete {
			return held, unread, &CutError{Unread: pids[i:], Total: len(pids), Err: ctx.Err()}
		}
		if err != nil && !exited(err) {
			unread[pid] = err
		}
		for _, dev := range slices.Concat(open, mapped) {
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

// ReadCharsHeld is ReadCharsOpen for the process whose procfs directory is
// dir (/proc/PID) that also reads its memory mappings (/proc/PID/maps),
// for the devices of want it did not find open: a ublk server maps its
// /dev/ublkcN (the I/O descriptors) and may close the fd, which the driver
// needs neither for the mapping nor for the commands of an io_uring that
// has the device among its registered files; the mapping lasts while it
// serves. It returns the devices open and those only mapped. The mappings
// are typed as Holders types them (map_files, then the path from the
// lookup cache); one typed neither way is an error, as are maps not read
// within MapsWait or not read at all (EACCES, EMFILE; an exited process
// maps nothing): what the process maps is then not known. Incomplete as
// ReadCharsOpen is, it does not read the mappings.
func ReadCharsHeld(ctx context.Context, dir string, want map[DevNum]bool) (open, mapped []DevNum, complete bool, err error) {
	open, complete, err = ReadCharsOpen(ctx, filepath.Join(dir, "fd"), want)
	if err != nil || !complete || len(open) == len(want) {
		return open, nil, complete, err
	}
	rest := map[DevNum]bool{}
	for dev := range want {
		if !slices.Contains(open, dev) {
			rest[dev] = true
		}
	}
	type result struct {
		mapped []DevNum
		err    error
	}
	r, ok, late := within(ctx, filepath.Join(dir, "maps"), MapsWait, func() (r result) {
		r.mapped, r.err = charsMapped(dir, rest)
		return r
	})
	if !ok {
		return open, nil, true, fmt.Errorf("ublk: %s not read within %v%s", filepath.Join(dir, "maps"), MapsWait, late.says(
			"/proc/PID/maps waits for the process's memory-map lock"))
	}
	return open, r.mapped, true, r.err
}

// charsMapped returns the character devices of want that the process whose
// procfs directory is dir maps, each once, in the order of its mappings.
func charsMapped(dir string, want map[DevNum]bool) ([]DevNum, error) {
	f, err := os.Open(filepath.Join(dir, "maps"))
	if exited(err) {
		return nil, nil // gone: it maps nothing now
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	root := processRoot{dir: dir, fd: -1}
	defer root.close()
	var out []DevNum
	var untyped error // the first mapping typed neither way
	typed := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 16*1024), 1024*1024)
	for sc.Scan() {
		// 7f2c4a000000-7f2c4a001000 r--s 00000000 00:05 1042    /dev/ublkc0
		line := sc.Bytes()
		addr, rest := nextField(line)
		_, rest = nextField(rest) // perms
		_, rest = nextField(rest) // offset
		keyStart := len(line) - len(bytes.TrimLeft(rest, " "))
		_, rest = nextField(rest) // device
		inode, rest := nextField(rest)
		if len(inode) == 0 || string(inode) == "0" || bytes.HasSuffix(line, ringMapping) {
			continue // anonymous memory, or a ring's queues
		}
		key := string(line[keyStart : len(line)-len(rest)])
		start, end, ok := addrRange(addr)
		if typed[key] || !ok {
			continue
		}
		dev, char, ok, err := typeMapping(dir, &root, start, end, string(bytes.TrimLeft(rest, " ")), unix.S_IFCHR)
		if err != nil && untyped == nil {
			untyped = fmt.Errorf("ublk: %w", err)
		}
		typed[key] = ok
		if char && want[dev] && !slices.Contains(out, dev) {
			out = append(out, dev)
		}
	}
	if err := sc.Err(); err != nil && !exited(err) {
		return out, err
	}
	return out, untyped
}
