//go:build linux

package ublkserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/uring"
)

// ControlPath is the ublk control device.
const ControlPath = "/dev/ublk-control"

// control sends commands to /dev/ublk-control as IORING_OP_URING_CMD on a
// ring set up with SQE128 (the 32-byte command does not fit a plain SQE).
// One command at a time.
type control struct {
	f    *os.File
	ring *uring.Ring
	// pinned keeps the buffers of commands abandoned on a context's end
	// alive: the kernel may still write them.
	pinned [][]byte
	seq    uint64
	// unprivileged: the server's devices are added with
	// UBLK_F_UNPRIVILEGED_DEV (Config.Unprivileged).
	unprivileged bool
}

func openControl() (*control, error) {
	f, err := os.OpenFile(ControlPath, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("ublkserver: %w (is the ublk_drv module loaded?)", err)
	}
	r, err := uring.New(4, uring.SetupSQE128)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &control{f: f, ring: r}, nil
}

func (c *control) Close() error {
	return errors.Join(c.ring.Close(), c.f.Close())
}

// do sends one command and returns the kernel's non-negative result, or
// ctx's error when ctx ends first: the command then stays with the kernel
// (its buffer is kept alive) and its completion is skipped later. buf,
// when not nil, is the command's in/out buffer (addr and len). A command
// of an unprivileged server's names the device's /dev/ublkcN; one of the
// outside Control's that the driver refused EINVAL without it (the
// device is another's, added with UBLK_F_UNPRIVILEGED_DEV) is sent again
// naming it.
func (c *control) do(ctx context.Context, op, devID uint32, buf []byte, data0 uint64) (int32, error) {
	if c.unprivileged && op != cmdAddDev {
		return c.send(ctx, op, devID, buf, data0, charDevPath(devID))
	}
	res, err := c.send(ctx, op, devID, buf, data0, "")
	if errors.Is(err, unix.EINVAL) && (op == cmdGetDevInfo || op == cmdStopDev || op == cmdDelDev) {
		return c.send(ctx, op, devID, buf, data0, charDevPath(devID))
	}
	return res, err
}

// send sends one command as do describes, naming charDev when not empty:
// the path, then buf, at addr, with dev_path_len its length; buf gets
// what the kernel wrote after the path.
func (c *control) send(ctx context.Context, op, devID uint32, buf []byte, data0 uint64, charDev string) (int32, error) {
	payload := buf
	if charDev != "" {
		payload = append([]byte(charDev), buf...)
	}
	var addr uint64
	if len(payload) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&payload[0])))
	}
	c.seq++
	tag := c.seq
	if _, err := c.ring.Submit(uring.URingCmd(int(c.f.Fd()), op, ctrlCmd(devID, addr, uint16(len(payload)), data0, uint16(len(charDev))), tag)); err != nil {
		return 0, err
	}
	var cqe uring.CQE
	for cqe.UserData != tag {
		var err error
		// An abandoned earlier command may complete first; skip it.
		if cqe, err = c.ring.WaitCQE(ctx); err != nil {
			c.pinned = append(c.pinned, payload)
			return 0, err
		}
	}
	runtime.KeepAlive(payload)
	copy(buf, payload[len(charDev):])
	if cqe.Res < 0 {
		return cqe.Res, unix.Errno(-cqe.Res)
	}
	return cqe.Res, nil
}

// charDevPath is device id's char device node.
func charDevPath(id uint32) string { return fmt.Sprintf("/dev/ublkc%d", id) }

func (c *control) addDev(ctx context.Context, want devInfo) (devInfo, error) {
	buf := make([]byte, devInfoSize)
	want.encode(buf)
	if _, err := c.do(ctx, cmdAddDev, want.DevID, buf, 0); err != nil {
		return devInfo{}, fmt.Errorf("ublkserver: ADD_DEV: %w", err)
	}
	return decodeDevInfo(buf), nil
}

func (c *control) setParams(ctx context.Context, devID uint32, sectors uint64, maxSectors uint32) error {
	buf := make([]byte, basicParamsN)
	basicParams(buf, sectors, maxSectors)
	if _, err := c.do(ctx, cmdSetParams, devID, buf, 0); err != nil {
		return fmt.Errorf("ublkserver: SET_PARAMS dev %d: %w", devID, err)
	}
	return nil
}

func (c *control) startDev(ctx context.Context, devID uint32, pid int) error {
	if _, err := c.do(ctx, cmdStartDev, devID, nil, uint64(pid)); err != nil {
		return fmt.Errorf("ublkserver: START_DEV dev %d: %w", devID, err)
	}
	return nil
}

func (c *control) stopDev(ctx context.Context, devID uint32) error {
	if _, err := c.do(ctx, cmdStopDev, devID, nil, 0); err != nil {
		return fmt.Errorf("ublkserver: STOP_DEV dev %d: %w", devID, err)
	}
	return nil
}

// delDev deletes the device; ENODEV (already gone) counts as done and EINTR
// (the kernel's wait for the last reference was interrupted) is retried.
func (c *control) delDev(ctx context.Context, devID uint32) error {
	for {
		_, err := c.do(ctx, cmdDelDev, devID, nil, 0)
		switch {
		case err == nil, errors.Is(err, unix.ENODEV):
			return nil
		case errors.Is(err, unix.EINTR) && ctx.Err() == nil:
			continue
		default:
			return fmt.Errorf("ublkserver: DEL_DEV dev %d: %w", devID, err)
		}
	}
}

func (c *control) devInfo(ctx context.Context, devID uint32) (devInfo, error) {
	buf := make([]byte, devInfoSize)
	if _, err := c.do(ctx, cmdGetDevInfo, devID, buf, 0); err != nil {
		return devInfo{}, fmt.Errorf("ublkserver: GET_DEV_INFO dev %d: %w", devID, err)
	}
	return decodeDevInfo(buf), nil
}
