//go:build linux

package blockdev

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
// a caller that is not root sees only its own user's processes, and a
// caller in a PID namespace only that namespace's (run the step where the
// VMMs are visible). Open files are classified from the attributes the
// kernel already has, so a file on a file system whose server is gone (a
// hung NFS or FUSE mount) does not hold the scan. Holders returns ctx.Err()
// if ctx ends before the scan is complete.
func Holders(ctx context.Context, procRoot string, dev DevNum) ([]Holder, error) {
	found, err := Scan(ctx, procRoot, []DevNum{dev})
	return found[dev], err
}

// Scan is Holders for several devices in one pass over procfs.
func Scan(ctx context.Context, procRoot string, devs []DevNum) (map[DevNum][]Holder, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("ublk: holders: %w", err)
	}
	want := make(map[DevNum]bool, len(devs))
	for _, d := range devs {
		want[d] = true
	}
	out := map[DevNum][]Holder{}
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
		var comm string
		add := func(dev DevNum, kind, detail string) {
			if comm == "" {
				comm = readComm(dir)
			}
			out[dev] = append(out[dev], Holder{PID: pid, Comm: comm, Kind: kind, Detail: detail})
		}
		FDHolders(dir, want, func(dev DevNum, fd string) { add(dev, FD, fd) })
		ns, _ := os.Readlink(filepath.Join(dir, "ns", "mnt"))
		if ns != "" && seenNS[ns] {
			continue
		}
		seenNS[ns] = ns != ""
		mountHolders(filepath.Join(dir, "mountinfo"), want, func(dev DevNum, mp string) { add(dev, Mount, mp) })
	}
	swapHolders(filepath.Join(procRoot, "swaps"), want, func(dev DevNum, name string) {
		out[dev] = append(out[dev], Holder{Kind: Swap, Detail: name})
	})
	return out, nil
}

func readComm(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "comm"))
	return strings.TrimSpace(string(b))
}

// FDHolders calls found with "fd N -> PATH" for each open file of the
// process whose procfs directory is dir (/proc/PID) that is one of the
// wanted block devices.
func FDHolders(dir string, want map[DevNum]bool, found func(DevNum, string)) {
	fdDir := filepath.Join(dir, "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		link := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(link)
		if err != nil || isAnon(target) {
			continue // sockets, pipes and anon inodes are never block devices
		}
		if dev, ok := blockDev(link); ok && want[dev] {
			found(dev, fmt.Sprintf("fd %s -> %s", e.Name(), target))
		}
	}
}

func isAnon(target string) bool {
	return strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "pipe:") ||
		strings.HasPrefix(target, "anon_inode:")
}

// blockDev stats p (following links) and returns its device number if it
// is a block device. It asks only for the file's type, from the attributes
// the kernel has (AT_STATX_DONT_SYNC): a file's type and device number
// never change, and a plain stat of a file on a network or FUSE file
// system asks its server for fresh attributes, and waits for ever when the
// server is gone (an NFS volume whose server went away, a hung FUSE
// daemon), holding up the whole scan.
func blockDev(p string) (DevNum, bool) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &st)
	if err != nil || st.Mask&unix.STATX_TYPE == 0 || uint32(st.Mode)&unix.S_IFMT != unix.S_IFBLK {
		return DevNum{}, false
	}
	return DevNum{st.Rdev_major, st.Rdev_minor}, true
}

// mountHolders calls found with the mount points whose file system is on
// a wanted device.
func mountHolders(mountinfo string, want map[DevNum]bool, found func(DevNum, string)) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if dev, err := ParseDevNum(fields[2]); err == nil && want[dev] {
			found(dev, unescapeOctal(fields[4]))
		}
	}
}

// swapHolders calls found with the swap areas on a wanted device.
func swapHolders(swaps string, want map[DevNum]bool, found func(DevNum, string)) {
	b, err := os.ReadFile(swaps)
	if err != nil { // no swap support, or not readable: nothing to report
		return
	}
	for i, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if i == 0 || len(fields) == 0 {
			continue // header: Filename Type Size Used Priority
		}
		name := unescapeOctal(fields[0])
		if dev, ok := blockDev(name); ok && want[dev] {
			found(dev, name)
		}
	}
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
// disk name and of its partitions parts under sysRoot.
func StackHolders(sysRoot, name string, parts []Partition) []Holder {
	diskDir := filepath.Join(sysRoot, blockDir, name)
	dirs := []string{diskDir}
	for _, p := range parts {
		dirs = append(dirs, filepath.Join(diskDir, p.Name))
	}
	var out []Holder
	for _, dir := range dirs {
		ents, _ := os.ReadDir(filepath.Join(dir, "holders"))
		for _, e := range ents {
			out = append(out, Holder{Kind: Stacked, Detail: e.Name()})
		}
	}
	return out
}
