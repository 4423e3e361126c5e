//go:build linux

package ublkserver

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// DeviceState is a ublk device's state as the driver reports it
// (GET_DEV_INFO), or StateGone once the device is deleted.
type DeviceState string

// The device states.
const (
	StateLive     DeviceState = "live"     // the disk exists and takes I/O
	StateDead     DeviceState = "dead"     // stopped (or its server died); DEL_DEV pending
	StateQuiesced DeviceState = "quiesced" // server gone, I/O held for a recovering server
	StateFailIO   DeviceState = "fail_io"  // server gone, I/O fails
	StateGone     DeviceState = "gone"     // deleted (ENODEV)
)

// Control acts on ublk devices from outside their server, through
// /dev/ublk-control, as a test oracle independent of the teardown step's
// own control code. One command at a time.
type Control struct{ c *control }

// OpenControl opens /dev/ublk-control.
func OpenControl() (*Control, error) {
	c, err := openControl()
	if err != nil {
		return nil, err
	}
	return &Control{c: c}, nil
}

// State returns device id's state (GET_DEV_INFO), StateGone when the
// driver does not know the id, or when the command, sent again naming the
// device's /dev/ublkcN (an unprivileged device's, which takes no command
// without it), found no such node: the node goes when DEL_DEV removes the
// device, which stops its disk first, so a DEL_DEV between the two sends
// (a teardown deleting the device as its daemon exits) left neither. On
// the guest's devtmpfs, where this runs, the node is there while the
// device is; in a container without the host's /dev it would not be.
func (c *Control) State(ctx context.Context, id int) (DeviceState, error) {
	info, err := c.c.devInfo(ctx, uint32(id))
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) {
		return StateGone, nil
	}
	if err != nil {
		return "", err
	}
	switch info.State {
	case stateDead:
		return StateDead, nil
	case stateLive:
		return StateLive, nil
	case 2:
		return StateQuiesced, nil
	case 3:
		return StateFailIO, nil
	}
	return DeviceState(fmt.Sprintf("state(%d)", info.State)), nil
}

// StopDev sends STOP_DEV; it returns when the kernel has removed the disk,
// which waits for every request in flight, or with ctx's error.
func (c *Control) StopDev(ctx context.Context, id int) error { return c.c.stopDev(ctx, uint32(id)) }

// DelDev sends DEL_DEV (ENODEV counts as done); the kernel waits until the
// server has closed /dev/ublkcN.
func (c *Control) DelDev(ctx context.Context, id int) error { return c.c.delDev(ctx, uint32(id)) }

// Close closes the control device.
func (c *Control) Close() error { return c.c.Close() }
