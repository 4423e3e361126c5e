package ublkstep

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// rig is device 0 of a fake sysfs held by a stacked device, dm-0, that
// lets go after release, on a kernel not known fixed, and an in-process
// daemon that deletes the device when asked to stop.
func rig(t *testing.T, release time.Duration, reserve *atomic.Int64) (*Teardown, *atomic.Int64) {
	t.Helper()
	tree, err := fakeublk.NewTree(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, tree.AddDevice(fakeublk.DeviceSpec{ID: 0, Major: 259, Minor: 0}))
	holders := filepath.Join(tree.Root, "block", "ublkb0", "holders")
	require.NoError(t, os.MkdirAll(holders, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(holders, "dm-0"), nil, 0o644))
	time.AfterFunc(release, func() { _ = os.Remove(filepath.Join(holders, "dm-0")) })
	var asked atomic.Int64 // when the daemon was asked to stop, since the rig's start
	start := time.Now()
	done := make(chan struct{})
	daemon := ublk.DaemonFuncs{
		StopFunc: func(context.Context) error {
			asked.Store(int64(time.Since(start)))
			if err := tree.StopDevice(0); err != nil {
				return err
			}
			if err := tree.DeleteDevice(0); err != nil {
				return err
			}
			close(done)
			return nil
		},
		WaitFunc: func(ctx context.Context) error {
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	}
	cfg := ublkhook.With(ublk.Config{}, ublkhook.Hooks{SysfsRoot: tree.Root, ProcfsRoot: t.TempDir(), KernelRelease: "6.8.0-45-generic"})
	td, err := New(daemon, cfg, func() time.Duration { return time.Duration(reserve.Load()) })
	require.NoError(t, err)
	return td, &asked
}

// Fault (docs/faults.md row 1055): the servers built their ublk teardown at
// start with -grace's reserve (an hour's: 30 s) while the plan's reserve
// for the step followed the grace in use (a 30 s deletion's: 3 s). In the
// step's window of 25 s (the preserve phase over early) the teardown kept
// 30 s for its stages: the holder wait got nothing, and the last resort
// came at once, for a disk whose holder lets go 2 s in:
//
//	0 s    the step starts, 25 s to its deadline; ublkb0 held by dm-0
//	before: the last resort at 0 s, dm-0 spared (kernel state), the
//	        daemon not asked to stop: a *HeldError, the device live for
//	        the pod's SIGKILL
//	1.95 s dm-0 lets go; 2 s, the next poll: the daemon is asked to stop,
//	       the device goes
//	22 s   (the last-resort point of the 3 s reserve: never reached)
func TestStopLaysItsStagesOutFromTheReserveInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reserve atomic.Int64
		reserve.Store(int64(30 * time.Second)) // -grace 1h's, at start
		td, asked := rig(t, 1950*time.Millisecond, &reserve)
		assert.Equal(t, 30*time.Second, td.Phase().Reserve())

		reserve.Store(int64(3 * time.Second)) // the deletion's 30 s, read at SIGTERM
		assert.Equal(t, 3*time.Second, td.Phase().Reserve(), "the plan reads the reserve in use")
		assert.Equal(t, "ublk", td.Phase().Name)
		assert.True(t, td.Phase().Critical)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		rep, err := td.Stop(ctx)
		t.Log(rep.String())
		require.NoError(t, err)
		assert.Nil(t, rep.LastResort, "no last resort: the holder let go inside the holder wait")
		assert.Equal(t, 2*time.Second, time.Duration(asked.Load()), "asked to stop at the first poll (100 ms) after dm-0 let go")
		assert.Equal(t, ublk.VerdictStopped, rep.Device(0).Verdict)
		assert.False(t, td.Tighten(time.Now().Add(time.Second)), "no Stop in progress")
	})
}

// The reserve a Stop took stands while it runs; a deadline moved earlier
// reaches the Stop in progress (drain calls Tighten), which lays its stages
// out again before it: here its holder wait ends at the new last-resort
// point, 10 s minus the 3 s reserve, and the last resort runs there.
func TestTightenReachesTheStopInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reserve atomic.Int64
		reserve.Store(int64(3 * time.Second))
		td, asked := rig(t, time.Hour, &reserve)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx, cut := context.WithCancel(ctx)
		time.AfterFunc(time.Second, func() {
			assert.True(t, td.Tighten(start.Add(10*time.Second)))
			time.AfterFunc(9*time.Second, cut)
		})
		rep, err := td.Stop(ctx)
		t.Log(rep.String())
		var held *ublk.HeldError
		require.ErrorAs(t, err, &held, "dm-0 never lets go; the daemon's death is not known to stop it")
		require.NotNil(t, rep.LastResort)
		assert.Equal(t, 7*time.Second, rep.LastResort.At.Sub(start), "the last-resort point of the new deadline")
		assert.Zero(t, asked.Load(), "never asked to stop under its holder")
	})
}
