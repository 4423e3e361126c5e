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

// scanDevices lists every ublk device under sysRoot (normally "/sys"),
// sorted by ID. A sysfs without the ublk-char class (no ublk module) has
// no devices, which is not an error.
func scanDevices(sysRoot string) ([]Device, error) {
	ids, err := listDevices(sysRoot)
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(ids))
	for _, id := range ids {
		d, err := readDevice(sysRoot, id)
		if err != nil {
			return nil, err
		}
		if d.Present() { // not one gone since the listing
			devs = append(devs, d)
		}
	}
	return devs, nil
}

// listDevices returns the ID of every ublk device under sysRoot, sorted,
// without reading the devices.
func listDevices(sysRoot string) ([]int, error) {
	ids := map[int]bool{}
	for dir, prefix := range map[string]string{charClassDir: "ublkc", blockDir: "ublkb"} {
		ents, err := os.ReadDir(filepath.Join(sysRoot, dir))
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

// readDevice reads the current state of ublk device id under sysRoot. A
// device that is gone reads as Device{ID: id}, not as an error; a disk
// whose dev or inflight file cannot be read (it is being removed) reads as
// present with zero values.
func readDevice(sysRoot string, id int) (Device, error) {
	d := Device{ID: id}
	var err error
	if d.Char, err = exists(filepath.Join(sysRoot, charClassDir, d.CharName())); err != nil {
		return d, err
	}
	disk := filepath.Join(sysRoot, blockDir, d.DiskName())
	if d.Disk, err = exists(disk); err != nil || !d.Disk {
		return d, err
	}
	if n, err := blockdev.ReadDevNum(sysRoot, d.DiskName()); err == nil {
		d.Dev = n.String()
	}
	if b, err := os.ReadFile(filepath.Join(disk, "inflight")); err == nil {
		d.Inflight = parseInflight(string(b))
	}
	return d, nil
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
func charEntry(sysRoot string, id int) uint64 {
	fi, err := os.Stat(filepath.Join(sysRoot, charClassDir, "ublkc"+strconv.Itoa(id)))
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
