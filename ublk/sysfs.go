package ublk

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// Sysfs locations, relative to the sysfs root (normally /sys).
const (
	charClassDir = "class/ublk-char" // ublkcN: from ADD_DEV until DEL_DEV removes the device, before its wait for the last reference
	blockDir     = "block"           // ublkbN: while the disk exists (LIVE, QUIESCED, FAIL_IO)
)

// Inflight is the block layer's count of requests in flight
// (/sys/block/NAME/inflight).
type Inflight struct {
	Reads  uint64 `json:"reads"`
	Writes uint64 `json:"writes"`
}

// Total returns Reads + Writes.
func (i Inflight) Total() uint64 { return i.Reads + i.Writes }

// Device is what sysfs shows of one ublk device at one moment. It is read
// without opening /dev/ublkcN: on 6.15+ closing that file runs the
// device's release path.
type Device struct {
	// ID is the ublk device number N of ublkcN and ublkbN.
	ID int `json:"id"`
	// Char is true while /sys/class/ublk-char/ublkcN exists: the device is
	// added and not yet deleted.
	Char bool `json:"char"`
	// Disk is true while /sys/block/ublkbN exists: the device is live (or
	// quiesced, or failing I/O) and can receive block I/O. It turns false
	// at the start of STOP_DEV, before the requests in flight have
	// drained.
	Disk bool `json:"disk"`
	// Dev is the disk's device number, "MAJOR:MINOR" as in
	// /sys/block/ublkbN/dev; empty when there is no disk.
	Dev string `json:"dev,omitempty"`
	// Inflight is the disk's in-flight I/O; zero when there is no disk.
	Inflight Inflight `json:"inflight"`
}

// Present reports whether any trace of the device is left in sysfs.
func (d Device) Present() bool { return d.Char || d.Disk }

// State names what sysfs shows: "live" (the disk exists), "dead" (only
// the char device is left: stopped, being stopped, or its server died;
// DEL_DEV pending) or "gone". Sysfs alone cannot tell a finished STOP_DEV
// from one still waiting for in-flight I/O: the disk's entry goes first.
func (d Device) State() string {
	switch {
	case d.Disk:
		return "live"
	case d.Char:
		return "dead"
	default:
		return "gone"
	}
}

// CharName returns "ublkcN".
func (d Device) CharName() string { return "ublkc" + strconv.Itoa(d.ID) }

// DiskName returns "ublkbN".
func (d Device) DiskName() string { return "ublkb" + strconv.Itoa(d.ID) }

// sysfs is the sysfs tree the step reads its devices from: its root
// (normally "/sys"), and, in this package's tests only, a hook called
// with each path before it is read (before: a node whose sysfs reads are
// slow, in virtual time). Every read of a device goes through it, so a
// test counts the reads a poll costs.
type sysfs struct {
	root   string
	before func(path string)
}

// path joins elem to the root, and calls the test's hook with it: the
// caller reads it next.
func (s sysfs) path(elem ...string) string {
	p := filepath.Join(append([]string{s.root}, elem...)...)
	if s.before != nil {
		s.before(p)
	}
	return p
}

// scanDevices lists every ublk device under sys, sorted by ID. A sysfs
// without the ublk-char class (no ublk module) has no devices, which is
// not an error.
func scanDevices(sys sysfs) ([]Device, error) {
	ids, err := listDevices(sys)
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(ids))
	for _, id := range ids {
		d, err := readDevice(sys, id)
		if err != nil {
			return nil, err
		}
		if d.Present() { // not one gone since the listing
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// listDevices returns the ID of every ublk device under sys, sorted,
// without reading the devices.
func listDevices(sys sysfs) ([]int, error) {
	ids := map[int]bool{}
	for dir, prefix := range map[string]string{charClassDir: "ublkc", blockDir: "ublkb"} {
		ents, err := os.ReadDir(sys.path(dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ublk: scan sysfs: %w", err)
		}
		for _, e := range ents {
			if n, ok := deviceID(e.Name(), prefix); ok {
				ids[n] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(ids)), nil
}

func deviceID(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0 && strconv.Itoa(n) == rest
}

// readDevice reads the current state of ublk device id under sys. A
// device that is gone reads as Device{ID: id}, not as an error; a disk
// whose dev or inflight file cannot be read (it is being removed) reads as
// present with zero values.
func readDevice(sys sysfs, id int) (Device, error) {
	d := Device{ID: id}
	var err error
	if d.Char, err = exists(sys.path(charClassDir, d.CharName())); err != nil {
		return d, err
	}
	if d.Disk, err = exists(sys.path(blockDir, d.DiskName())); err != nil || !d.Disk {
		return d, err
	}
	if b, err := os.ReadFile(sys.path(blockDir, d.DiskName(), "dev")); err == nil {
		if n, err := blockdev.ParseDevNum(string(b)); err == nil {
			d.Dev = n.String()
		}
	}
	if b, err := os.ReadFile(sys.path(blockDir, d.DiskName(), "inflight")); err == nil {
		d.Inflight = parseInflight(string(b))
	}
	return d, nil
}

// pollDevice reads device id again for a poll: 3 reads where readDevice
// and charEntry take 5. The char device's presence and its entry
// (charEntry) come from one stat, and the disk's from its dev number's
// read: the disk's directory is looked at only when that read fails.
// Each poll re-read every device 5 times, and on a loaded node (the
// guest's 8 devices: 124-300 ms a poll) the polls after the holder wait's
// last scan took the last resort's part (docs/faults.md row 3600).
func pollDevice(sys sysfs, id int) (d Device, entry uint64, err error) {
	d = Device{ID: id}
	switch fi, err := os.Stat(sys.path(charClassDir, d.CharName())); {
	case err == nil:
		d.Char, entry = true, inode(fi)
	case !errors.Is(err, fs.ErrNotExist):
		return d, 0, fmt.Errorf("ublk: %w", err)
	}
	b, err := os.ReadFile(sys.path(blockDir, d.DiskName(), "dev"))
	if err != nil { // no disk, or one being removed, or a dev not read
		if d.Disk, err = exists(sys.path(blockDir, d.DiskName())); err != nil || !d.Disk {
			return d, entry, err
		}
	}
	d.Disk = true
	if n, err := blockdev.ParseDevNum(string(b)); err == nil {
		d.Dev = n.String()
	}
	if b, err := os.ReadFile(sys.path(blockDir, d.DiskName(), "inflight")); err == nil {
		d.Inflight = parseInflight(string(b))
	}
	return d, entry, nil
}

func parseInflight(s string) Inflight {
	f := strings.Fields(s)
	var in Inflight
	if len(f) == 2 {
		in.Reads, _ = strconv.ParseUint(f[0], 10, 64)
		in.Writes, _ = strconv.ParseUint(f[1], 10, 64)
	}
	return in
}

// charEntry is the inode number of device id's char device entry in
// sysfs (0 when it cannot be read): sysfs gives each device it adds a new
// one, so a device that got the ID of one deleted (the kernel gives a
// freed ID to the next ADD_DEV) is told from it.
func charEntry(sys sysfs, id int) uint64 {
	fi, err := os.Stat(sys.path(charClassDir, "ublkc"+strconv.Itoa(id)))
	if err != nil {
		return 0
	}
	return inode(fi)
}

func exists(p string) (bool, error) {
	_, err := os.Lstat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("ublk: %w", err)
	}
}
