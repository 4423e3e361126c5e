//go:build linux

package ublkctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/uring"
)

// Control is a Controller over /dev/ublk-control: each command is an
// IORING_OP_URING_CMD on a ring set up with IORING_SETUP_SQE128. Commands
// are sent one at a time. A command whose ctx ends before the kernel
// answers keeps running in the kernel (the ublk driver does not cancel
// control commands); its buffer stays referenced until its completion
// arrives or Close. A device ID outside [0, MaxDevices) is an error, the
// command not sent.
type Control struct {
	f    *os.File
	ring *uring.Ring

	mu      sync.Mutex
	seq     uint64
	pending map[uint64][]byte // buffers the kernel may still write
}

// Open opens the ublk control device at path (DefaultPath
// when empty) and sets up its ring. A missing device fails with an error
// wrapping ErrNoControl.
func Open(path string) (*Control, error) {
	if path == "" {
		path = DefaultPath
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoControl, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ublk: open %s: %w", path, err)
	}
	ring, err := uring.New(4, uring.SetupSQE128)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ublk: control ring: %w", err)
	}
	return &Control{f: f, ring: ring, pending: map[uint64][]byte{}}, nil
}

// DevInfo sends GET_DEV_INFO for device id.
func (c *Control) DevInfo(ctx context.Context, id int) (DevInfo, error) {
	buf := make([]byte, devInfoSize)
	if err := c.do(ctx, cmdGetDevInfo, id, buf); err != nil {
		return DevInfo{}, err
	}
	return decodeDevInfo(buf), nil
}

// StopDev sends STOP_DEV for device id; ENODEV counts as done.
func (c *Control) StopDev(ctx context.Context, id int) error {
	err := c.do(ctx, cmdStopDev, id, nil)
	if errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

// DelDev sends DEL_DEV for device id; ENODEV counts as done and EINTR is
// retried while ctx lasts.
func (c *Control) DelDev(ctx context.Context, id int) error {
	for {
		err := c.do(ctx, cmdDelDev, id, nil)
		switch {
		case errors.Is(err, unix.ENODEV):
			return nil
		case errors.Is(err, unix.EINTR) && ctx.Err() == nil:
			continue
		default:
			return err
		}
	}
}

// do sends one command and waits for its completion until ctx ends. An
// ID no device can have is not sent (see MaxDevices).
func (c *Control) do(ctx context.Context, op uint32, id int, buf []byte) error {
	if id < 0 || id >= MaxDevices {
		return fmt.Errorf("ublk: %s: device ID %d out of range [0, %d): not sent", cmdName(op), id, MaxDevices)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return errors.New("ublk: control closed")
	}
	c.seq++
	tag := c.seq
	var addr uint64
	if len(buf) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
		c.pending[tag] = buf
	}
	cmd := encodeCtrlCmd(uint32(id), addr, uint16(len(buf)), 0)
	if _, err := c.ring.Submit(uring.URingCmd(int(c.f.Fd()), op, cmd, tag)); err != nil {
		delete(c.pending, tag)
		return fmt.Errorf("ublk: %s dev %d: %w", cmdName(op), id, err)
	}
	for {
		cqe, err := c.ring.WaitCQE(ctx)
		if err != nil {
			return fmt.Errorf("ublk: %s dev %d: %w", cmdName(op), id, err)
		}
		delete(c.pending, cqe.UserData) // an earlier, abandoned command may complete first
		if cqe.UserData == tag {
			if err := cqe.Err(); err != nil {
				return fmt.Errorf("ublk: %s dev %d: %w", cmdName(op), id, err)
			}
			return nil
		}
	}
}

// Close closes the ring and the control device.
func (c *Control) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := errors.Join(c.ring.Close(), c.f.Close())
	c.f, c.pending = nil, nil
	return err
}

func cmdName(op uint32) string {
	switch op {
	case cmdGetDevInfo:
		return "GET_DEV_INFO"
	case cmdStopDev:
		return "STOP_DEV"
	case cmdDelDev:
		return "DEL_DEV"
	}
	return fmt.Sprintf("cmd %#x", op)
}
