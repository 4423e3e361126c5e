package ublk

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/ublkctl"
)

// The daemon crashes after its first device and leaves ublkb1, which has
// UBLK_F_USER_RECOVERY: the kernel keeps it, quiesced, for the next server
// to recover. GET_DEV_INFO fails for it (EINVAL: the driver refuses the
// command for a device added with UBLK_F_UNPRIVILEGED_DEV), so the
// control fallback cannot read its flags. With its disk still there it may
// be waiting for recovery, and STOP_DEV or DEL_DEV would destroy it: the
// fallback leaves it and says why. Before, it sent both. A device whose
// flags are not known and whose disk is gone (stopped: DEAD, which no
// server recovers) is still deleted. The step lists both devices
// (Config.Devices): since row 1532 one with no disk found by the step
// itself is not taken until it has one.
func TestControlFallbackLeavesADeviceThatMayAwaitRecovery(t *testing.T) {
	for name, disk := range map[string]bool{"disk there": true, "disk gone": false} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0, 1)
				if !disk {
					require.NoError(t, f.tree.StopDevice(1))
				}
				d := newMemDaemon(f.tree, 0, 1)
				d.crashAfter = 1
				defer d.close()
				ctl := &memControl{tree: f.tree, d: d, flags: ublkctl.FlagUserRecovery,
					infoErr: errors.New("ublk: GET_DEV_INFO: invalid argument")}
				td, err := New(d, f.config(fixed, ctl, Config{Devices: []int{0, 1}}))
				require.NoError(t, err)
				rep, _, err := runFor(t, td, time.Minute)
				if !disk {
					require.NoError(t, err)
					assert.Contains(t, d.Events(), "DEL_DEV 1")
					assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
					return
				}
				var inc *IncompleteError
				require.ErrorAs(t, err, &inc)
				assert.Equal(t, []int{1}, inc.Devices)
				assert.NotContains(t, d.Events(), "STOP_DEV 1")
				assert.NotContains(t, d.Events(), "DEL_DEV 1")
				assert.True(t, f.tree.HasDisk(1), "left for the next server")
				assert.Equal(t, VerdictOrphaned, rep.Device(1).Verdict)
				steps := rep.Device(1).Steps
				require.NotEmpty(t, steps)
				last := steps[len(steps)-1]
				assert.Equal(t, "kept for recovery", last.Name)
				assert.Contains(t, last.Result, "flags not known")
			})
		})
	}
}
