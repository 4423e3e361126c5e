//go:build linux

package ublkguest

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
	"github.com/drainkit/drainkit/ublk"
)

// deletedBeforeFirstInfo is the step's Controller, the real one, before
// whose first GET_DEV_INFO the device is deleted by someone else.
type deletedBeforeFirstInfo struct {
	ublkctl.Controller
	once   sync.Once
	delete func()
}

func (c *deletedBeforeFirstInfo) DevInfo(ctx context.Context, id int) (ublkctl.DevInfo, error) {
	c.once.Do(c.delete)
	return c.Controller.DevInfo(ctx, id)
}

// TestGuestStepTakesADeviceDeletedBeforeItsGETDEVINFOForGone: the hung
// daemon's device is live when the step reads sysfs; before the control
// fallback's GET_DEV_INFO, someone else (an operator's `ublk del`) stops
// it, the daemon dies with it stopped, and the device is deleted. The real
// driver answers ENODEV, and the step takes the device for gone, what it
// set out to do: no error in its Report, STOP_DEV and DEL_DEV not tried,
// verdict stopped. Before, GET_DEV_INFO was a read that failed, with a
// warning, and STOP_DEV and DEL_DEV "not sent" (docs/faults.md row 3080).
func TestGuestStepTakesADeviceDeletedBeforeItsGETDEVINFOForGone(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{Mode: ublkserver.Hung})
	id := r.daemon.Devices[0]
	deleteIt := func() {
		ctx := r.ctx(10 * time.Second)
		require.NoError(t, r.ctl.StopDev(ctx, id))
		require.NoError(t, r.daemon.Cmd.Process.Kill()) // safe: its device is stopped
		_ = r.daemon.Wait(ctx)
		require.NoError(t, r.ctl.DelDev(ctx, id))
	}
	cfg := ublkhook.With(ublk.Config{RequestTimeout: time.Second, ExitWait: 500 * time.Millisecond, Reserve: 3 * time.Second},
		ublkhook.Hooks{OpenControl: func(context.Context) (ublkctl.Controller, error) {
			c, err := ublkctl.Open("")
			if err != nil {
				return nil, err
			}
			return &deletedBeforeFirstInfo{Controller: c, delete: deleteIt}, nil
		}})
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	rep, err := r.step(cfg).Stop(ctx)
	t.Log(rep.String())
	require.NoError(t, err)
	assert.Equal(t, ublk.VerdictStopped, rep.Device(id).Verdict)
	info := stepNamed(rep, id, "GET_DEV_INFO")
	require.NotNil(t, info, "the fallback asked the driver")
	assert.Empty(t, info.Err, "the driver's ENODEV is the device gone, not a read that failed")
	assert.Contains(t, info.Result, "gone: the driver has no device")
	assert.Contains(t, info.Result, "no such device")
	for _, name := range []string{"STOP_DEV", "DEL_DEV", "kept for recovery"} {
		assert.Nil(t, stepNamed(rep, id, name), "%s for a device gone", name)
	}
	r.devicesGone()
	noKernelProblemsSince(t, r.logFrom)
}

// TestGuestStepDoesNotWaitForTheLastReferenceOfADeviceItDeleted: the
// daemon crashes when asked to stop, while a "VMM" (this process) still
// has /dev/ublkb0 open, the step told to stop despite holders. The
// control fallback sends DEL_DEV, which the real driver runs in two parts:
// it removes the device (its char device and disk leave sysfs, the device
// marked deleted), then waits for its last reference, the open disk,
// before it frees the ID. The step stops waiting once the char device has
// left sysfs and returns, where it waited to its deadline (docs/faults.md
// row 3082); the driver frees the device by itself once the VMM closes
// the disk.
func TestGuestStepDoesNotWaitForTheLastReferenceOfADeviceItDeleted(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{Mode: ublkserver.Crash})
	id := r.daemon.Devices[0]
	vmm, err := os.Open(r.disk(id))
	require.NoError(t, err)
	defer vmm.Close()
	deadline := time.Now().Add(8 * time.Second)
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	rep, err := r.step(ublk.Config{HolderWait: 200 * time.Millisecond, StopDespiteHolders: true, RequestTimeout: time.Second,
		ExitWait: 500 * time.Millisecond, Reserve: 3 * time.Second}).Stop(ctx)
	returned := time.Now()
	t.Log(rep.String())
	require.NoError(t, err)
	assert.True(t, rep.Daemon.Exited, "crashed")
	del := stepNamed(rep, id, "DEL_DEV")
	require.NotNil(t, del, "DEL_DEV through the control device")
	assert.Empty(t, del.Err)
	assert.Contains(t, del.Result, "done: the device removed")
	assert.Equal(t, ublk.VerdictStoppedByControl, rep.Device(id).Verdict)
	assert.Less(t, returned.Sub(del.Start), time.Second, "returned once the device was removed, %v before its deadline", deadline.Sub(returned))
	assert.Equal(t, ublkserver.StateDead, r.state(id), "the driver keeps the device while the VMM has its disk open")

	require.NoError(t, vmm.Close())
	require.Eventually(t, func() bool { return r.state(id) == ublkserver.StateGone }, 10*time.Second, 10*time.Millisecond,
		"freed by the driver at the last close")
	noKernelProblemsSince(t, r.logFrom)
}
