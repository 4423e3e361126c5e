package fakeublk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DeviceSpec describes one fake ublk device.
type DeviceSpec struct {
	// ID is N in ublkcN / ublkbN.
	ID int `json:"id"`
	// Major and Minor go to /sys/block/ublkbN/dev. Point them at a real
	// block device (a loop device) when a test needs a process to hold
	// "the" device open; otherwise any numbers do.
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// Reads and Writes are the initial /sys/block/ublkbN/inflight.
	Reads  uint64 `json:"reads"`
	Writes uint64 `json:"writes"`
	// CharMajor and CharMinor, when CharMajor is not zero, go to
	// /sys/class/ublk-char/ublkcN/dev, and a daemon serving the device
	// holds a char device node with that number open, as a real server
	// holds /dev/ublkcN (root only: the node is made with mknod). Zero:
	// sysfs shows no number, and no process holds the char device.
	CharMajor uint32 `json:"char_major,omitempty"`
	CharMinor uint32 `json:"char_minor,omitempty"`
}

// Tree is a fake sysfs root laid out as the kernel lays out ublk devices:
//
//	ROOT/class/ublk-char/ublkcN -> ../../devices/virtual/ublk-char/ublkcN
//	ROOT/block/ublkbN           -> ../devices/virtual/block/ublkbN  (dev, inflight)
//
// Its methods mirror what the kernel does: AddDevice is ADD_DEV +
// START_DEV, StopDevice is STOP_DEV (the disk goes), DeleteDevice is
// DEL_DEV (the char device goes). A Tree is a path; several processes may
// work on the same root.
type Tree struct {
	// Root is the fake sysfs root, to be given to ublk as ublkhook.Hooks.SysfsRoot.
	Root string
}

// NewTree creates the class and block directories under root.
func NewTree(root string) (*Tree, error) {
	for _, d := range []string{"class/ublk-char", "block", "devices/virtual/ublk-char", "devices/virtual/block"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("fakeublk: %w", err)
		}
	}
	return &Tree{Root: root}, nil
}

func (t *Tree) charLink(id int) string {
	return filepath.Join(t.Root, "class/ublk-char", "ublkc"+strconv.Itoa(id))
}
func (t *Tree) charDir(id int) string {
	return filepath.Join(t.Root, "devices/virtual/ublk-char", "ublkc"+strconv.Itoa(id))
}
func (t *Tree) blockLink(id int) string {
	return filepath.Join(t.Root, "block", "ublkb"+strconv.Itoa(id))
}
func (t *Tree) blockDir(id int) string {
	return filepath.Join(t.Root, "devices/virtual/block", "ublkb"+strconv.Itoa(id))
}

// AddDevice creates a live device: its char entry (AddChar, as ADD_DEV)
// and its disk with dev and inflight files (StartDevice, as START_DEV).
// The disk's symlink appears last, so a concurrent reader never sees a
// disk without its files.
func (t *Tree) AddDevice(d DeviceSpec) error {
	if err := t.AddChar(d); err != nil {
		return err
	}
	return t.StartDevice(d)
}

// AddChar creates device d's char entry alone, as ADD_DEV does: a device
// added and not started yet has no disk (StartDevice adds it).
func (t *Tree) AddChar(d DeviceSpec) error {
	if err := os.MkdirAll(t.charDir(d.ID), 0o755); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	if d.CharMajor != 0 {
		dev := fmt.Sprintf("%d:%d\n", d.CharMajor, d.CharMinor)
		if err := os.WriteFile(filepath.Join(t.charDir(d.ID), "dev"), []byte(dev), 0o644); err != nil {
			return fmt.Errorf("fakeublk: %w", err)
		}
	}
	if err := os.Symlink(t.charDir(d.ID), t.charLink(d.ID)); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	return nil
}

// StartDevice adds the disk of device d, added by AddChar, with its dev
// and inflight files, as START_DEV does, its symlink last.
func (t *Tree) StartDevice(d DeviceSpec) error {
	if err := os.MkdirAll(t.blockDir(d.ID), 0o755); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	files := map[string]string{
		"dev":      fmt.Sprintf("%d:%d\n", d.Major, d.Minor),
		"inflight": inflightText(d.Reads, d.Writes),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(t.blockDir(d.ID), name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("fakeublk: %w", err)
		}
	}
	if err := os.Symlink(t.blockDir(d.ID), t.blockLink(d.ID)); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	return nil
}

// SetInflight rewrites the disk's inflight file.
func (t *Tree) SetInflight(id int, reads, writes uint64) error {
	p := filepath.Join(t.blockDir(id), "inflight")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(inflightText(reads, writes)), 0o644); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	return os.Rename(tmp, p)
}

// inflightText is the content of /sys/block/NAME/inflight, as the kernel
// prints it.
func inflightText(reads, writes uint64) string { return fmt.Sprintf("%8d %8d\n", reads, writes) }

// StopDevice removes the disk, as STOP_DEV does. Stopping a device
// without a disk is not an error.
func (t *Tree) StopDevice(id int) error {
	return removeLinkAndDir(t.blockLink(id), t.blockDir(id))
}

// DeleteDevice removes the char device (and the disk if it is still
// there), as DEL_DEV does once the last reference is gone.
func (t *Tree) DeleteDevice(id int) error {
	if err := t.StopDevice(id); err != nil {
		return err
	}
	return removeLinkAndDir(t.charLink(id), t.charDir(id))
}

func removeLinkAndDir(link, dir string) error {
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fakeublk: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("fakeublk: %w", err)
	}
	return nil
}

// HasDisk reports whether device id's disk exists.
func (t *Tree) HasDisk(id int) bool { _, err := os.Lstat(t.blockLink(id)); return err == nil }

// HasChar reports whether device id's char entry exists.
func (t *Tree) HasChar(id int) bool { _, err := os.Lstat(t.charLink(id)); return err == nil }

// Devices returns the IDs that still have a char entry or a disk, sorted.
func (t *Tree) Devices() []int {
	var ids []int
	for dir, prefix := range map[string]string{"class/ublk-char": "ublkc", "block": "ublkb"} {
		ents, _ := os.ReadDir(filepath.Join(t.Root, dir))
		for _, e := range ents {
			if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), prefix)); err == nil && !slices.Contains(ids, n) {
				ids = append(ids, n)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
