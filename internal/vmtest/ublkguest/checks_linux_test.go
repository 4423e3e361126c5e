//go:build linux

package ublkguest

import (
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// The write check on the host, with the errors the guest's 6.12 driver
// gives: a write issued (its clock read) just before the daemon logged
// "stopping" may reach the disk only after STOP_DEV removed it, and the
// kernel refuses it with ENOSPC, never having accepted it: that is no
// aborted I/O. One that fails with EIO was accepted and aborted.
func TestWriteRefusedByTheRemovedDiskIsNotAbortedIO(t *testing.T) {
	stopping := time.Unix(100, 0)
	events := []ublkserver.Event{{At: stopping, Kind: ublkserver.EventStopping, Device: 0}}
	write := func(err error) Observed {
		return Observed{Devices: []int{0}, Events: events, Writes: []Write{
			{Off: 0, Start: stopping.Add(-time.Second), End: stopping.Add(-time.Second)},
			{Off: 4096, Start: stopping.Add(-time.Microsecond), End: stopping.Add(time.Millisecond), Err: err},
		}}
	}
	var rec Recorder
	assert.True(t, checkAcceptedWritesCompleted(&rec, write(&fs.PathError{Op: "write", Path: "/dev/ublkb0", Err: unix.ENOSPC})), "%v", rec.Failures)

	rec = Recorder{}
	assert.False(t, checkAcceptedWritesCompleted(&rec, write(&fs.PathError{Op: "write", Path: "/dev/ublkb0", Err: unix.EIO})))
	assert.Len(t, rec.Failures, 1)

	rec = Recorder{}
	later := write(errors.New("any error"))
	later.Writes[1].Start = stopping.Add(time.Microsecond)
	assert.True(t, checkAcceptedWritesCompleted(&rec, later), "a write issued after stopping began may fail: %v", rec.Failures)
}
