//go:build linux

package ublkguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
)

// Observed is what a guest test saw around one teardown of a daemon's
// devices while I/O was running on them.
type Observed struct {
	Devices   []int              // the daemon's device ids
	DaemonErr error              // how the daemon process ended (Daemon.Wait): nil is exit status 0
	Events    []ublkserver.Event // the daemon's event log
	Writes    []Write            // every write issued to the devices (all of them on Devices[0])
	Disk      []byte             // Devices[0]'s backing file after the teardown
	Control   *ublkserver.Control
	LogFrom   int // kernel log records before the test began (len of vmtest.KernelLog then)
}

// CheckSafeTeardown asserts, on t, what a safe teardown of a daemon with
// I/O in flight leaves behind, and reports whether every check passed:
//
//   - every device is gone: driver (GET_DEV_INFO says ENODEV),
//     /sys/class/ublk-char/ublkcN and /sys/block/ublkbN;
//   - the daemon exited by itself with status 0 (it was not killed);
//   - no write issued while the disk was live, before the daemon began
//     stopping it, failed, except one refused with ENOSPC because it
//     reached the disk only once it was gone: I/O the disk accepted is
//     completed, not aborted by the teardown (later writes may fail: the
//     disk is going);
//   - every acknowledged write is in the backing store, byte for byte;
//   - the guest kernel logged no bug, warning, oops or hung task.
//
// The checks use assert, not require, so that a test can run them on a
// recorder to show that they catch a broken order (see KillFirst).
func CheckSafeTeardown(t assert.TestingT, o Observed) bool {
	ok := CheckDevicesGone(t, o.Control, o.Devices)
	var exit *exec.ExitError
	if errors.As(o.DaemonErr, &exit) {
		ok = assert.Fail(t, "daemon did not exit by itself with status 0", "%v", exit) && ok
	} else {
		ok = assert.NoError(t, o.DaemonErr, "daemon exit") && ok
	}
	ok = checkAcceptedWritesCompleted(t, o) && ok
	for _, err := range VerifyAcked(o.Disk, o.Writes) {
		ok = assert.NoError(t, err) && ok
	}
	log, err := vmtest.KernelLog()
	ok = assert.NoError(t, err) && ok
	if o.LogFrom <= len(log) {
		log = log[o.LogFrom:]
	}
	ok = assert.Empty(t, vmtest.KernelProblems(log), "guest kernel log reports problems") && ok
	return ok
}

// CheckDevicesGone asserts, on t, that every device in ids is gone: the
// driver no longer knows it (GET_DEV_INFO through ctl says ENODEV) and
// /sys/class/ublk-char/ublkcN and /sys/block/ublkbN have left sysfs. It
// reports whether they all are.
func CheckDevicesGone(t assert.TestingT, ctl *ublkserver.Control, ids []int) bool {
	ok := true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		st, err := ctl.State(ctx, id)
		ok = assert.NoError(t, err) && ok
		ok = assert.Equal(t, ublkserver.StateGone, st, "ublk device %d still known to the driver", id) && ok
		for _, p := range []string{fmt.Sprintf("/sys/class/ublk-char/ublkc%d", id), fmt.Sprintf("/sys/block/ublkb%d", id)} {
			_, err := os.Stat(p)
			ok = assert.True(t, errors.Is(err, os.ErrNotExist), "%s left behind", p) && ok
		}
	}
	return ok
}

// checkAcceptedWritesCompleted: a write issued before the daemon's first
// "stopping" event (or at all, when it never logged one) must not fail,
// unless the disk never accepted it. Start is read before the write enters
// the kernel, so under load (the writer, or the VM's vCPU, preempted
// between its clock read and the syscall) a write can be issued before
// "stopping" and reach the disk only once STOP_DEV began removing it. The
// kernel then refuses it at submission: with EIO once the disk is marked
// dead, with ENOSPC once its capacity is zero. Either way it never reached
// the daemon, so its block is not on the disk, and it returned after
// "stopping". A write the disk accepted and the teardown aborted reached
// the daemon, which wrote its block, or it failed before the teardown
// began: both fail the check.
func checkAcceptedWritesCompleted(t assert.TestingT, o Observed) bool {
	stopping, found := time.Now(), false
	if len(o.Devices) > 0 {
		var e ublkserver.Event
		if e, found = ublkserver.First(o.Events, ublkserver.EventStopping, o.Devices[0]); found {
			stopping = e.At
		}
	}
	ok := true
	for _, w := range o.Writes {
		if w.Err == nil || !w.Start.Before(stopping) || errors.Is(w.Err, unix.ENOSPC) {
			continue
		}
		if found && Refused(w, stopping, o.Disk) {
			continue
		}
		when := "the daemon never began stopping the disk"
		if found {
			when = fmt.Sprintf("issued %v before the daemon began stopping the disk", stopping.Sub(w.Start).Round(time.Microsecond))
		}
		ok = assert.Fail(t, "a write the live disk accepted failed: I/O in flight was aborted",
			"write at %d: %s: %v", w.Off, when, w.Err) && ok
	}
	return ok
}

// Refused reports whether w, a failed write, was refused by a disk going
// away rather than accepted and aborted: with ENOSPC (its capacity was
// zero), or with any error returned after stopping (when its removal
// began) without its block on disk (the device's content after the
// teardown), which a write that reached the daemon would have put there.
func Refused(w Write, stopping time.Time, disk []byte) bool {
	if errors.Is(w.Err, unix.ENOSPC) {
		return true
	}
	return w.End.After(stopping) && !landed(disk, w)
}

// landed reports whether w's block is on disk, or may be: when disk does
// not cover it.
func landed(disk []byte, w Write) bool {
	if w.Off < 0 || w.Off+BlockSize > int64(len(disk)) {
		return true
	}
	return bytes.Equal(disk[w.Off:w.Off+BlockSize], Pattern(w.Off, w.Tag))
}

// Recorder is an assert.TestingT that records failures instead of failing
// a test, to check that checks fail when they must.
type Recorder struct{ Failures []string }

// Errorf records one failure.
func (r *Recorder) Errorf(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}
