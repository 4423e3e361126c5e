//go:build linux

package ublkguest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
)

// TestGuestControlTellsTheKernelByAProbeNoDeviceChanges: the real driver
// answers the Control's probe, GET_DEV_INFO with its plain number for
// dev_id U32_MAX, ENODEV (its look-up before the command: 6.1.43 on), not
// the EINVAL of 6.0 and 6.1 to 6.1.42, whose handlers looked the device
// up themselves. So an ENODEV to an ioctl-encoded number is told a device
// that does not exist without sending the command again (rows 2522,
// 2523), and a device's EINVAL is never read as one gone. A device that
// does not exist: DEL_DEV and STOP_DEV done, GET_DEV_INFO ENODEV, in both
// encodings; the live device next to it untouched, read by the same
// Control.
func TestGuestControlTellsTheKernelByAProbeNoDeviceChanges(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{})
	id := r.daemon.Devices[0]
	absent := slices.Max(r.daemon.Devices) + 1
	for _, plain := range []bool{false, true} {
		ctl, err := ublkctl.Open("")
		require.NoError(t, err)
		if plain {
			ctl.UsePlainNumbers()
		}
		ctx := r.ctx(10 * time.Second)
		require.NoError(t, ctl.DelDev(ctx, absent), "no device %d: DEL_DEV done", absent)
		require.NoError(t, ctl.StopDev(ctx, absent), "no device %d: STOP_DEV done", absent)
		_, err = ctl.DevInfo(ctx, absent)
		require.ErrorIs(t, err, unix.ENODEV, "no device %d", absent)
		assert.NotErrorIs(t, err, unix.EINVAL)
		age, err := ctl.KernelAge(ctx)
		require.NoError(t, err)
		assert.Equal(t, "6.1.43 on", age, "the driver looks the device up before the command")
		info, err := ctl.DevInfo(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, ublkctl.StateLive, info.State)
		require.NoError(t, ctl.Close())
	}
	require.Equal(t, ublkserver.StateLive, r.state(id), "nothing reached the live device")
}
