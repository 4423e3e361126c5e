package ublk

import (
	"fmt"
)

// HoldKind says how a holder keeps a block device busy.
type HoldKind string

const (
	// HeldByFD: a process has the device node open (a VMM's disk).
	HeldByFD HoldKind = "fd"
	// HeldByMount: a file system on the device is mounted in a mount
	// namespace; PID is one process in that namespace.
	HeldByMount HoldKind = "mount"
	// HeldBySwap: the device is active swap.
	HeldBySwap HoldKind = "swap"
	// HeldByStack: another block device (device-mapper, md) is stacked on
	// it (sysfs holders/).
	HeldByStack HoldKind = "stacked"
)

// Holder is one user of a block device.
type Holder struct {
	// PID is the holding process, 0 for swap and stacked devices.
	PID int `json:"pid,omitempty"`
	// Comm is the process's command name (/proc/PID/comm).
	Comm string `json:"comm,omitempty"`
	// Kind says how the device is held.
	Kind HoldKind `json:"kind"`
	// Detail is the fd and path, the mount point, the swap file or the
	// stacked device's name.
	Detail string `json:"detail"`
}

// String describes the holder in one line, for logs and errors.
func (h Holder) String() string {
	if h.PID == 0 {
		return fmt.Sprintf("%s %s", h.Kind, h.Detail)
	}
	return fmt.Sprintf("pid %d (%s) %s %s", h.PID, h.Comm, h.Kind, h.Detail)
}
