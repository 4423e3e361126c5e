package ublk

import (
	"fmt"
	"slices"
	"strings"
)

// UnsafeError is Run's error when, at the deadline, devices are still live
// on a kernel where killing their daemon can crash the host: the daemon
// was left running. Find it with errors.As.
type UnsafeError struct {
	// Devices are the IDs still live.
	Devices []int
	// Kernel is the release string, classified as Class.
	Kernel string
	// Class is KernelVulnerable or KernelExitMayHang; empty reads as
	// KernelVulnerable.
	Class KernelClass
	// Cause is why the devices did not go (ctx's error, a failed request,
	// an unavailable control device), may be nil.
	Cause error
}

// Error names the live devices and the kernel, and says the daemon was left
// running because killing it is unsafe.
func (e *UnsafeError) Error() string {
	class := e.Class
	if class == "" {
		class = KernelVulnerable
	}
	msg := fmt.Sprintf("ublk: %d device(s) still live (%s) on %s kernel %s: daemon left running, unsafe to kill",
		len(e.Devices), diskNames(e.Devices), class, e.Kernel)
	return msg + causeText(e.Cause)
}

// Unwrap returns Cause.
func (e *UnsafeError) Unwrap() error { return e.Cause }

// causeText renders a cause (often an errors.Join) on one line.
func causeText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + strings.ReplaceAll(err.Error(), "\n", "; ")
}

// HeldError is Run's error when devices were still held after HolderWait
// (by a process's fd, mapping or io_uring, a mount, swap, a stacked device
// or a loop device backed by a disk), and the policy forbids stopping
// anyway: the daemon was not asked to stop. A possible holder (the kernel
// did not show part of what a process holds) is not one of them: it is
// set aside when the holder wait ends.
type HeldError struct {
	Holders map[int][]Holder // by device ID
}

// Error names every holder of every device still held open.
func (e *HeldError) Error() string {
	return "ublk: devices still open, daemon not asked to stop: " + heldText(e.Holders)
}

// heldText names each device and its holders, "ublkbN held by ...", in
// order, joined with "; ".
func heldText(held map[int][]Holder) string {
	var parts []string
	for id, hs := range held {
		var s []string
		for _, h := range hs {
			s = append(s, h.String())
		}
		parts = append(parts, fmt.Sprintf("ublkb%d held by %s", id, strings.Join(s, ", ")))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// StoppedHeldError is Stop's error when the last resort stopped devices
// that something it may not kill still held (a mount, a file system, swap,
// a stacked or loop device, a holder outside the server's cgroup). Their
// daemon was in the server's cgroup: at the pod's SIGKILL the daemon dies
// and the kernel stops them, under the same holders (one with
// UBLK_F_USER_RECOVERY it quiesces for a next server, which is given up),
// and on a kernel not known fixed the daemon's death with live devices
// can crash the host. Stopped before, with STOP_DEV
// while the daemon served them, their I/O in flight completed and the
// daemon exited with no live device. The holders saw their disk go: a
// fault to look into, not a crash. Find it with errors.As.
//
// Holders has every device the last resort sent STOP_DEV under its
// holders, their disks gone from sysfs as the command began; one whose
// STOP_DEV was not seen complete when the step ended (a hung daemon does
// not answer its I/O in flight) is named as sent, not stopped: it may be
// live still, as its Report entry says.
type StoppedHeldError struct {
	Holders map[int][]Holder // by device ID

	notComplete []int // of Holders' devices, those whose STOP_DEV was not seen complete
	recovery    []int // of Holders' devices, those with UBLK_F_USER_RECOVERY
}

// Error names every device stopped and what held it, and apart those
// whose STOP_DEV was sent and not seen complete.
func (e *StoppedHeldError) Error() string {
	stopped, sent, recovery := map[int][]Holder{}, map[int][]Holder{}, map[int][]Holder{}
	for id, hs := range e.Holders {
		switch {
		case slices.Contains(e.recovery, id):
			recovery[id] = hs
		case slices.Contains(e.notComplete, id):
			sent[id] = hs
		default:
			stopped[id] = hs
		}
	}
	var parts []string
	if len(stopped) > 0 {
		parts = append(parts, "devices still held stopped before the pod's SIGKILL, which would have stopped them with their daemon "+
			"(no UBLK_F_USER_RECOVERY): "+heldText(stopped))
	}
	if len(sent) > 0 {
		parts = append(parts, "STOP_DEV sent to devices still held before the pod's SIGKILL (no UBLK_F_USER_RECOVERY), not seen complete "+
			"when the step ended (the daemon had not answered their I/O in flight: they may be live): "+heldText(sent))
	}
	if len(recovery) > 0 {
		parts = append(parts, "STOP_DEV sent to devices with UBLK_F_USER_RECOVERY still held before the pod's SIGKILL, their recovery given up "+
			"(on this kernel their daemon's death with them live is the host-crash race): "+heldText(recovery))
	}
	return "ublk: " + strings.Join(parts, "; ")
}

// IncompleteError is Run's error when devices are left for another reason:
// the daemon crashed and left them, it was killed on a safe kernel, or the
// deadline came first. Report says which, per device.
type IncompleteError struct {
	Devices []int
	Verdict Verdict
	Cause   error
}

// Error names the devices left and the verdict.
func (e *IncompleteError) Error() string {
	msg := fmt.Sprintf("ublk: %d device(s) left (%s): %s", len(e.Devices), diskNames(e.Devices), e.Verdict)
	return msg + causeText(e.Cause)
}

// Unwrap returns Cause.
func (e *IncompleteError) Unwrap() error { return e.Cause }

func diskNames(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprintf("ublkb%d", id)
	}
	return strings.Join(s, ", ")
}
