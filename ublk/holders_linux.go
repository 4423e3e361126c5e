//go:build linux

package ublk

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Holders returns every user of the block device dev that procfs at
// procRoot (normally "/proc") shows: processes with the device node open
// (/proc/PID/fd links whose target is a block device with that rdev,
// wherever the node lives, chroots included), mounts of a file system on it
// (/proc/PID/mountinfo, one entry per mount namespace) and swap on it
// (/proc/swaps). It works for any block device, loop and ublk alike.
//
// Processes that vanish or cannot be read during the scan are skipped, so
// a caller that is not root sees only its own user's processes. Holders
// returns ctx.Err() if ctx ends before the scan is complete.
func Holders(ctx context.Context, procRoot string, dev DevNum) ([]Holder, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("ublk: holders: %w", err)
	}
	var out []Holder
	seenNS := map[string]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		dir := filepath.Join(procRoot, e.Name())
		comm := readComm(dir)
		for _, fd := range fdHolders(dir, dev) {
			out = append(out, Holder{PID: pid, Comm: comm, Kind: HeldByFD, Detail: fd})
		}
		ns, _ := os.Readlink(filepath.Join(dir, "ns", "mnt"))
		if ns != "" && seenNS[ns] {
			continue
		}
		seenNS[ns] = ns != ""
		for _, mp := range mountHolders(filepath.Join(dir, "mountinfo"), dev) {
			out = append(out, Holder{PID: pid, Comm: comm, Kind: HeldByMount, Detail: mp})
		}
	}
	for _, sw := range swapHolders(filepath.Join(procRoot, "swaps"), dev) {
		out = append(out, Holder{Kind: HeldBySwap, Detail: sw})
	}
	return out, nil
}

func readComm(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "comm"))
	return strings.TrimSpace(string(b))
}

// fdHolders returns "fd N -> PATH" for each open file of the process that
// is the block device dev.
func fdHolders(dir string, dev DevNum) []string {
	fdDir := filepath.Join(dir, "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		link := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(link)
		if err != nil || isAnon(target) {
			continue // sockets, pipes and anon inodes are never block devices
		}
		if isBlockDev(link, dev) {
			out = append(out, fmt.Sprintf("fd %s -> %s", e.Name(), target))
		}
	}
	return out
}

func isAnon(target string) bool {
	return strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "pipe:") ||
		strings.HasPrefix(target, "anon_inode:")
}

// isBlockDev stats p (following links) and compares its rdev with dev.
func isBlockDev(p string, dev DevNum) bool {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFBLK &&
		unix.Major(st.Rdev) == dev.Major && unix.Minor(st.Rdev) == dev.Minor
}

// mountHolders returns the mount points whose file system is on dev.
func mountHolders(mountinfo string, dev DevNum) []string {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil
	}
	defer f.Close()
	want := dev.String()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && fields[2] == want {
			out = append(out, unescapeOctal(fields[4]))
		}
	}
	return out
}

// swapHolders returns the swap areas on dev.
func swapHolders(swaps string, dev DevNum) []string {
	b, err := os.ReadFile(swaps)
	if err != nil { // no swap support, or not readable: nothing to report
		return nil
	}
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if i == 0 || len(fields) == 0 {
			continue // header: Filename Type Size Used Priority
		}
		name := unescapeOctal(fields[0])
		if isBlockDev(name, dev) {
			out = append(out, name)
		}
	}
	return out
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

// stackHolders lists sysRoot/block/NAME/holders (device-mapper, md).
func stackHolders(sysRoot, name string) []Holder {
	ents, err := os.ReadDir(filepath.Join(sysRoot, blockDir, name, "holders"))
	if err != nil {
		return nil
	}
	out := make([]Holder, 0, len(ents))
	for _, e := range ents {
		out = append(out, Holder{Kind: HeldByStack, Detail: e.Name()})
	}
	return out
}
