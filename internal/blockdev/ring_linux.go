//go:build linux

package blockdev

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RingWait is the longest RingHolders (and one scan) spends on one
// process's io_uring registered files. The kernel lists a ring's
// registered files in /proc/PID/fdinfo/N only when it gets the ring's lock
// with a trylock, and a busy ring (one submitting, or an SQPOLL thread at
// work) often holds it: the fdinfo is read again, ringReads times at most,
// a few milliseconds apart. The first kernels with the list (5.6, until
// fad8e0de4426 in September 2020) wait for the lock instead, for as long as
// the ring holds it. It bounds one scan's reads only: a caller that must
// know (the ublk step) scans again, and a ring that is busy only now and
// then is listed at a later scan.
const RingWait = 100 * time.Millisecond

// ringReads is how many times a ring's fdinfo is read before its
// registered files are given up as not known.
const ringReads = 4

// RingHolders calls found with "io_uring fd N slot I -> PATH" for each
// wanted block device that an io_uring of the process whose procfs
// directory is dir (/proc/PID) has among its registered files
// (IORING_REGISTER_FILES, and the files updated into its table after),
// whether or not the process still has an fd open on the device: the ring
// holds the file open, and its I/O fails once the device is stopped. Only
// the process's io_uring fds (anon_inode:[io_uring]) are read. When the
// kernel has not listed a ring's files after ringReads reads (see
// RingWait), it returns an error and calls found for what the other rings
// hold; when the reads take longer than RingWait, it returns an error and
// calls found for none, saying why: the kernel waited for the ring's lock
// (the reading thread asleep in the read then), or the machine was too
// busy to run the reads in time (it was running, or waiting to run: a
// bound in real time passes on a loaded node too); when a ring's fdinfo cannot be read (an error
// other than the fd's close or the process's exit: EACCES, EMFILE), it
// returns an error naming it. The error says what is not known: the
// process may hold a wanted device through that ring (a Possible holder,
// to Scan).
//
// The kernel's list (io_uring/fdinfo.c, "UserFiles:\t<n>" then one line
// per slot) names each file by its path since Linux 6.14, escaped like
// mountinfo and relative to the reader's root; the path is resolved from
// the kernel's lookup cache only, and matched by device number. Before
// 6.14 it names the file's last component alone ("loop3"), which is
// matched as the device node /dev/NAME, as devtmpfs names it.
func RingHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) error {
	rings, _, _ := fdHolders(context.Background(), dir, want, nil)
	if len(rings) == 0 {
		return nil
	}
	if unknown := ringHolders(context.Background(), dir, rings, want, found); unknown != "" {
		return fmt.Errorf("ublk: holders: %s: %s", dir, unknown)
	}
	return nil
}

// ringHolders is RingHolders for the ring fds rings of the process, not
// waiting past ctx's end; it returns what is not known, "" when every
// ring's files were listed. What it returns begins with RingsNotKnown.
func ringHolders(ctx context.Context, dir string, rings []string, want map[DevNum]bool, found func(DevNum, string)) (unknown string) {
	type result struct {
		hits       []holding
		unlisted   []string
		unreadable []string // "N (error)"
	}
	r, ok, late := within(ctx, filepath.Join(dir, "fdinfo"), RingWait, func() (r result) {
		for _, fd := range rings {
			files, known, err := readRing(filepath.Join(dir, "fdinfo", fd))
			switch {
			case err != nil:
				r.unreadable = append(r.unreadable, fmt.Sprintf("%s (%v)", fd, err))
			case !known:
				r.unlisted = append(r.unlisted, fd)
			}
			for _, f := range files {
				if dev, how, ok := f.device(want); ok {
					r.hits = append(r.hits, holding{dev, fmt.Sprintf("io_uring fd %s slot %d -> %s%s", fd, f.slot, f.name, how)})
				}
			}
		}
		return r
	})
	if !ok {
		return fmt.Sprintf("io_uring fd %s: fdinfo not read within %v%s; its registered files are not known",
			strings.Join(rings, ", "), RingWait, late.says("the kernel waited for the ring's lock"))
	}
	for _, h := range r.hits {
		found(h.dev, h.detail)
	}
	var says []string
	if len(r.unlisted) > 0 {
		says = append(says, fmt.Sprintf("io_uring fd %s: the registered files not listed by the kernel in %d reads within %v (/proc/PID/fdinfo lists them only when it gets the ring's lock, which a busy or stuck ring holds); they are not known", strings.Join(r.unlisted, ", "), ringReads, RingWait))
	}
	if len(r.unreadable) > 0 {
		says = append(says, fmt.Sprintf("io_uring fd %s: fdinfo not read; the registered files are not known", strings.Join(r.unreadable, ", ")))
	}
	return strings.Join(says, "; ")
}

// readRing reads a ring's fdinfo until the kernel lists its registered
// files, ringReads times at most, with a short pause between reads (the
// ring's lock is taken and released at every submission). An fdinfo that
// cannot be read for another reason than the fd's close or the process's
// exit (EACCES, EMFILE) is an error: what the ring holds is not known.
func readRing(fdinfo string) (files []ringFile, known bool, err error) {
	for i := range ringReads {
		if i > 0 {
			time.Sleep(time.Millisecond << (i - 1))
		}
		b, err := os.ReadFile(fdinfo)
		if exited(err) {
			return nil, true, nil // closed, or the process exited: holds nothing now
		}
		if err != nil {
			return nil, false, err
		}
		if files, known = ringFiles(b); known {
			return files, true, nil
		}
	}
	return nil, false, nil
}

// ringFile is one occupied slot of a ring's registered files, as the
// kernel names its file: a path (escaped) or, before Linux 6.14, the last
// component of one.
type ringFile struct {
	slot int
	name string
}

// ringFiles parses a ring's fdinfo (io_uring/fdinfo.c): the registered
// files it lists, and whether that list is known to be complete.
//
//	UserFiles:	3          the size of the ring's file table
//	    0: /dev/ublkb0     since 6.14 (561e3a0c40dc): occupied slots only, seq_file_path(" \t\n\\")
//	    1: ublkb1          5.6-6.13: every slot, the dentry's inline name (d_iname)
//	    2: <none>          5.6-6.13: an empty slot
//
// The slot lines are printed only when the read got ctx->uring_lock with a
// trylock (since fad8e0de4426, 2020; the first kernels wait for it). Since
// 6.15 and 6.14.8 (d871198ee431) a read without the lock prints nothing of
// the ring, no UserFiles line; before, it prints the UserFiles line and no
// slot lines.
// So the list is complete when UserFiles is 0, or when at least one slot
// line follows it; a count above 0 with no slot line is a read without the
// lock (or, since 6.14, a table whose every slot is empty, which fdinfo
// does not tell apart) and is not known, and so is a missing UserFiles
// line (a read without the lock since 6.15, or a kernel before 5.6).
func ringFiles(info []byte) (files []ringFile, known bool) {
	sc := bufio.NewScanner(bytes.NewReader(info))
	sc.Buffer(make([]byte, 0, 4096), 1024*1024)
	n, listed := -1, 0
	for sc.Scan() {
		line := sc.Text()
		if n < 0 {
			if v, ok := strings.CutPrefix(line, "UserFiles:\t"); ok {
				c, err := strconv.Atoi(v)
				if err != nil {
					return nil, false
				}
				n = c
			}
			continue
		}
		slot, name, ok := strings.Cut(strings.TrimLeft(line, " "), ": ")
		i, err := strconv.Atoi(slot)
		if !ok || err != nil {
			break // UserBufs: the list has ended
		}
		listed++
		if name != "<none>" {
			files = append(files, ringFile{i, name})
		}
	}
	switch {
	case n < 0:
		return nil, false
	case n == 0:
		return nil, true
	}
	return files, listed > 0
}

// device returns the wanted device f is, and how it was matched when not
// by its path ("" then).
func (f ringFile) device(want map[DevNum]bool) (DevNum, string, bool) {
	if strings.Contains(f.name, "/") { // a path, since 6.14
		p := strings.TrimSuffix(unescapeOctal(f.name), " (deleted)")
		dev, block, err := cachedBlockDev(p)
		if err == nil {
			return dev, "", block && want[dev]
		}
		// Not in the lookup cache, or a path of another mount namespace:
		// the node's name, as before 6.14.
		f.name = filepath.Base(p)
	}
	node := "/dev/" + f.name
	dev, block, err := cachedBlockDev(node)
	if err != nil || !block || !want[dev] {
		return DevNum{}, "", false
	}
	return dev, " (matched by name as " + node + ": the kernel gave no path)", true
}
