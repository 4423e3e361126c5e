package daemonhold_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/examples/internal/daemonhold"
	"github.com/drainkit/drainkit/ublk"
)

// A server whose exit kills its daemon holds that exit only where the kill may crash the
// host (a kernel not known fixed) and the step left the daemon possibly serving a live
// device: one of its own left live or held, or a disk it could not see.
func TestHoldOnlyForADaemonThatMayServeALiveDeviceOnAKernelNotKnownFixed(t *testing.T) {
	live := []ublk.DeviceReport{{ID: 0, Verdict: ublk.VerdictStopped}, {ID: 1, Verdict: ublk.VerdictLeftLive}, {ID: 2, Verdict: ublk.VerdictHeld}}
	stopped := []ublk.DeviceReport{{ID: 0, Verdict: ublk.VerdictStopped}}
	cannotTell := ublk.DaemonReport{LeftRunning: true, CannotTell: "open /sys/block: not a directory"}
	for _, tc := range []struct {
		name string
		rep  *ublk.Report
		want bool
	}{
		{"no step ran", nil, false},
		{"devices left live, vulnerable kernel", &ublk.Report{KernelClass: ublk.KernelVulnerable, Devices: live}, true},
		{"devices left live, kernel whose daemon exit may hang", &ublk.Report{KernelClass: ublk.KernelExitMayHang, Devices: live}, true},
		{"devices left live, fixed kernel", &ublk.Report{KernelClass: ublk.KernelFixed, Devices: live}, false},
		{"devices left live, unaffected kernel", &ublk.Report{KernelClass: ublk.KernelUnaffected, Devices: live}, false},
		{"every device stopped", &ublk.Report{KernelClass: ublk.KernelVulnerable, Devices: stopped}, false},
		{"every device stopped, cannot tell what else the daemon serves", &ublk.Report{KernelClass: ublk.KernelVulnerable, Devices: stopped, Daemon: cannotTell}, true},
		{"cannot tell, fixed kernel", &ublk.Report{KernelClass: ublk.KernelFixed, Devices: stopped, Daemon: cannotTell}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, daemonhold.Needed(tc.rep))
		})
	}
	assert.Equal(t, []int{1, 2}, daemonhold.Live(&ublk.Report{Devices: live}))
}
