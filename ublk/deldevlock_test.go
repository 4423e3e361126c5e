package ublk

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a driver of 5.19 to 6.2, DEL_DEV removes the device, then waits for
// its last reference with wait_event while it holds the driver's global
// ublk_ctl_mutex (0abe39dec065, 6.3, released the lock first and made the
// wait interruptible). The daemon crashes after its first device and
// leaves ublkb1, whose disk a VMM still has open. A DEL_DEV of it would
// put the step's thread in D state: its window's end cannot interrupt it,
// every other control command on the node queues behind the lock, and the
// process cannot finish exiting. So on such a kernel the step stops the
// device (DEAD, harmless) and does not send DEL_DEV.
//
//	0s   request; the daemon stops and deletes ublkb0
//	2s   it crashes: ublkb1 live; STOP_DEV 1 -> DEAD
//	     DEL_DEV 1 not sent (before: sent, and still waiting at 2 min,
//	     past the step's 1 min deadline, until the VMM closed the disk)
func TestOnAKernelWhoseDelDevWaitsUnderTheControlLockTheStepSendsNoDelDev(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0, 1)
		d := newMemDaemon(f.tree, 0, 1)
		d.crashAfter = 1
		defer d.close()
		vmmCloses := make(chan struct{})
		ctl := &memControl{tree: f.tree, d: d, lastRefHeld: map[int]bool{1: true}, delDevLocked: true, lastRefGone: vmmCloses}
		td, err := New(d, f.config("6.1.10", ctl, Config{}))
		require.NoError(t, err)

		var rep *Report
		var took time.Duration
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			rep, _ = td.Stop(ctx)
			took = time.Since(start)
		}()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		select {
		case <-returned:
		default:
			t.Error("the step is still in DEL_DEV at 2 min, a minute past its deadline")
		}
		close(vmmCloses)
		<-returned
		require.NotNil(t, rep)
		t.Log(rep.String())
		assert.LessOrEqual(t, took, 2*time.Second+td.cfg.poll, "ends once the device is stopped")
		assert.Contains(t, d.Events(), "STOP_DEV 1")
		assert.NotContains(t, d.Events(), "DEL_DEV 1")
		del := stepOf(rep.Device(1), "DEL_DEV")
		require.NotNil(t, del, "the Report says why no DEL_DEV")
		assert.Contains(t, del.Result, "not sent")
		assert.Contains(t, del.Result, "ublk_ctl_mutex")
		assert.Equal(t, VerdictStoppedByControl, rep.Device(1).Verdict)
	})
}
