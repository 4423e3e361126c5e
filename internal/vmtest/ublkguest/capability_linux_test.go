//go:build linux

package ublkguest

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkserver"
	"github.com/drainkit/drainkit/internal/vmtest"
)

// TestGuestControlWithoutCapSysAdminNamesIt: the step's control commands
// sent from a thread without CAP_SYS_ADMIN (a step run in a container not
// given it), to the real driver, for a live device of a daemon run as
// root. The driver answers each EPERM, and the error, which the step's
// Report carries for the command, names the missing capability. The
// device is left live, untouched.
func TestGuestControlWithoutCapSysAdminNamesIt(t *testing.T) {
	vmtest.GuestOnly(t)
	r := newRig(t, ublkserver.DaemonConfig{})
	id := r.daemon.Devices[0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if !assert.NoError(t, unix.Capget(&hdr, &data[0])) {
			return
		}
		data[unix.CAP_SYS_ADMIN/32].Effective &^= 1 << (unix.CAP_SYS_ADMIN % 32)
		if !assert.NoError(t, unix.Capset(&hdr, &data[0])) {
			return
		}
		ctl, err := ublkctl.Open("")
		if !assert.NoError(t, err, "the control device opens: root owns it") {
			return
		}
		defer ctl.Close()
		_, err = ctl.DevInfo(r.ctx(10*time.Second), id)
		assert.ErrorIs(t, err, unix.EPERM)
		assert.ErrorContains(t, err, "this process lacks CAP_SYS_ADMIN")
		err = ctl.StopDev(r.ctx(10*time.Second), id)
		assert.ErrorIs(t, err, unix.EPERM)
		assert.ErrorContains(t, err, "STOP_DEV dev")
		assert.ErrorContains(t, err, "this process lacks CAP_SYS_ADMIN")
	}()
	<-done
	require.Equal(t, ublkserver.StateLive, r.state(id), "nothing reached the device")
}
