//go:build linux

package ublkctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/realpart"
)

func TestOpenWithoutDeviceSaysLoadTheModule(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "ublk-control"))
	require.ErrorIs(t, err, ErrNoControl)
	assert.Contains(t, err.Error(), "modprobe ublk_drv")
}

// A control "device" that is a regular file proves the command path end
// to end on any kernel: the ring takes the URING_CMD, and the file's
// missing ->uring_cmd answers EOPNOTSUPP, to the ioctl-encoded number and
// then the plain one, as a kernel before 6.4 would the first.
func TestControlCommandsReachTheKernel(t *testing.T) {
	c, ctx := fileControl(t)
	_, err := c.DevInfo(ctx, 0)
	assert.ErrorIs(t, err, unix.EOPNOTSUPP)
	assert.ErrorContains(t, err, "GET_DEV_INFO dev 0: refused as an unknown command in both encodings: ioctl 0x80207502: operation not supported; plain 0x02")
	assert.ErrorIs(t, c.StopDev(ctx, 3), unix.EOPNOTSUPP)
	assert.ErrorIs(t, c.DelDev(ctx, 3), unix.EOPNOTSUPP)
	require.NoError(t, c.Close())
	assert.Error(t, c.StopDev(ctx, 3), "closed")
}

// A device ID no ublk device can have (negative, or from UBLK_MAX_UBLKS
// up) is refused before anything is sent. Before, it was cut to the
// command's 32 bits: 1<<32 went to the driver as device 0, another
// device, and -1 as 0xffffffff, which no device has, so STOP_DEV and
// DEL_DEV got ENODEV and said done. Here the "control device" is a
// regular file, which answers every command sent EOPNOTSUPP: an error
// without it is one nothing was sent for.
func TestCommandsRefuseADeviceIDOutOfRange(t *testing.T) {
	c, ctx := fileControl(t)
	for _, id := range []int{-1, MaxDevices, 1 << 32} {
		_, err := c.DevInfo(ctx, id)
		assert.ErrorContains(t, err, fmt.Sprintf("GET_DEV_INFO: device ID %d out of range [0, 1048576): not sent", id))
		for _, err := range []error{err, c.StopDev(ctx, id), c.DelDev(ctx, id)} {
			require.Error(t, err, "id %d", id)
			assert.NotErrorIs(t, err, unix.EOPNOTSUPP, "id %d: sent to the driver", id)
		}
	}
	_, err := c.DevInfo(ctx, MaxDevices-1)
	assert.ErrorIs(t, err, unix.EOPNOTSUPP, "the last ID a device can have is sent")
}

// fileControl opens a regular file as the control device, which takes
// every command on the ring and answers it EOPNOTSUPP (it has no
// ->uring_cmd), and returns it with a context for its commands; both end
// with the test.
func fileControl(t *testing.T) (*Control, context.Context) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ublk-control")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	c, err := Open(p)
	if err != nil && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)) {
		realpart.Missing(t, fmt.Sprintf("io_uring unavailable on this kernel (%v); see /proc/sys/kernel/io_uring_disabled", err))
	}
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}
