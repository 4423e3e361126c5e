//go:build linux

package ublkguest

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkserver"
)

// The write check on the host, with the errors the guest's 6.12 driver
// gives: a write issued (its clock read) just before the daemon logged
// "stopping" may reach the disk only after STOP_DEV began removing it, and
// the kernel refuses it, never having accepted it: ENOSPC once the
// capacity is zero, EIO once the disk is marked dead. That is no aborted
// I/O. A write that reached the daemon (its block is on the disk) and
// failed, or that failed before "stopping", was accepted and aborted.
func TestWriteRefusedByTheRemovedDiskIsNotAbortedIO(t *testing.T) {
	stopping := time.Unix(100, 0)
	events := []ublkserver.Event{{At: stopping, Kind: ublkserver.EventStopping, Device: 0}}
	disk := make([]byte, 4*BlockSize)
	copy(disk, Pattern(0, 1))
	write := func(err error) Observed {
		return Observed{Devices: []int{0}, Events: events, Disk: disk, Writes: []Write{
			{Off: 0, Tag: 1, Start: stopping.Add(-time.Second), End: stopping.Add(-time.Second)},
			{Off: BlockSize, Tag: 2, Start: stopping.Add(-5 * time.Millisecond), End: stopping.Add(time.Millisecond), Err: err},
		}}
	}
	eio := &fs.PathError{Op: "write", Path: "/dev/ublkb0", Err: unix.EIO}
	var rec Recorder
	assert.True(t, checkAcceptedWritesCompleted(&rec, write(&fs.PathError{Op: "write", Path: "/dev/ublkb0", Err: unix.ENOSPC})), "%v", rec.Failures)

	rec = Recorder{}
	assert.True(t, checkAcceptedWritesCompleted(&rec, write(eio)), "EIO at submission to the dead disk: %v", rec.Failures)

	rec = Recorder{}
	served := write(eio)
	served.Disk = slices.Clone(disk)
	copy(served.Disk[BlockSize:], Pattern(BlockSize, 2))
	assert.False(t, checkAcceptedWritesCompleted(&rec, served), "the daemon wrote its block: accepted, then aborted")
	assert.Len(t, rec.Failures, 1)

	rec = Recorder{}
	before := write(eio)
	before.Writes[1].End = stopping.Add(-time.Microsecond)
	assert.False(t, checkAcceptedWritesCompleted(&rec, before), "failed before the teardown began")

	rec = Recorder{}
	unknown := write(eio)
	unknown.Events = nil
	assert.False(t, checkAcceptedWritesCompleted(&rec, unknown), "the daemon never began stopping: every failed write is aborted I/O")

	rec = Recorder{}
	later := write(errors.New("any error"))
	later.Writes[1].Start = stopping.Add(time.Microsecond)
	assert.True(t, checkAcceptedWritesCompleted(&rec, later), "a write issued after stopping began may fail: %v", rec.Failures)
}
