package ublk

import (
	"context"
	"errors"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errBudgetMoved stands for drain's cause when it ends a step at the new
// deadline of a budget that moved SIGKILL earlier.
var errBudgetMoved = errors.New("the budget moved SIGKILL earlier")

//	0 s     the step starts with a 60 s window: its stop request at once,
//	        the control fallback planned at 55 s, the kill at 58 s; the
//	        daemon takes the request and hangs (or never answers it)
//	0.1 s   the budget moves SIGKILL earlier (a pod deletion read with a
//	        shorter grace): the step's deadline is now 1.5 s; drain says
//	        so (Tighten) and ends the step's context there
//	0.5 s   the stages laid out again in the 1.4 s left: STOP_DEV through
//	        the control device (0.2 s to drain)
//	1.1 s   the kill's point: no device live, the daemon is killed
//	        then DEL_DEV; 1.5 s is never reached
//
// Before, the step kept the stages of its 60 s and, cancelled at 1.5 s,
// had sent the stop request alone: the device left live, and the pod's
// SIGKILL killed the daemon with it, the host-crash path on this kernel.
// Given the 1.5 s as its deadline from the start, it did STOP_DEV, the
// kill and DEL_DEV; told of it at 0.1 s, it does the same now.
func TestTightenedDeadlineRunsTheLateStagesBeforeIt(t *testing.T) {
	for _, daemon := range []string{"hung", "mute"} {
		t.Run(daemon, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, 0)
				d := newMemDaemon(f.tree, 0)
				d.hung, d.mute = daemon == "hung", daemon == "mute"
				defer d.close()
				ctl := &memControl{tree: f.tree, d: d, stopIn: 200 * time.Millisecond}
				td, err := New(d, f.config(vulnerable, ctl, Config{}))
				require.NoError(t, err)
				assert.False(t, td.Tighten(time.Now().Add(time.Second)), "no Stop in progress: nothing to move")

				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				ctx, cut := context.WithCancelCause(ctx)
				dl := start.Add(1500 * time.Millisecond)
				time.AfterFunc(100*time.Millisecond, func() { // as drain's followBudget does
					assert.False(t, td.Tighten(start.Add(90*time.Second)), "never later")
					assert.True(t, td.Tighten(dl))
					assert.False(t, td.Tighten(dl.Add(time.Second)), "never later")
					time.AfterFunc(time.Until(dl), func() { cut(errBudgetMoved) })
				})
				rep, err := td.Stop(ctx)
				took := time.Since(start)

				require.NoError(t, err)
				assert.Equal(t, []string{"request", "STOP_DEV 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events(),
					"the daemon killed only once STOP_DEV completed")
				assert.Equal(t, VerdictStoppedByControl, rep.Device(0).Verdict)
				assert.True(t, rep.Daemon.Killed)
				assert.Less(t, took, 1500*time.Millisecond, "done before the new deadline")
				assert.True(t, rep.Deadline.Equal(dl), "the Report's deadline is the one it ran to: %v", rep.Deadline.Sub(start))
				moved := rep.Step("deadline moved")
				require.NotNil(t, moved)
				assert.Equal(t, 100*time.Millisecond, moved.Start.Sub(start))
				kill := rep.Step("kill daemon")
				require.NotNil(t, kill)
				assert.Equal(t, 1100*time.Millisecond, kill.Start.Sub(start), "at the new kill point, 58 s's share of the time left")
			})
		})
	}
}

//	0 s     the step starts with a 60 s window; a stacked device holds
//	        ublkb0, so the holder wait runs (planned until 50 s)
//	0.1 s   the deadline moves to 20 s: the holder wait now ends at 10 s
//	        at the latest, the fallback at 15 s, the kill at 18 s
//	5 s     the holder closes: the hung daemon is asked to stop
//	15 s    STOP_DEV; 18 s the kill, no device live; DEL_DEV
//
// Before, the holder wait and the request went as planned, and the step,
// cancelled at 20 s, had its fallback at 55 s: the device left live.
func TestTightenedDuringTheHolderWaitLaysOutTheLaterStages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		p := f.hold(t, 0, "dm-0")
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		time.AfterFunc(5*time.Second+time.Millisecond, func() { _ = os.Remove(p) }) // not as a scan runs
		ctl := &memControl{tree: f.tree, d: d, stopIn: 200 * time.Millisecond}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ctx, cut := context.WithCancelCause(ctx)
		dl := start.Add(20 * time.Second)
		time.AfterFunc(100*time.Millisecond, func() {
			assert.True(t, td.Tighten(dl))
			time.AfterFunc(time.Until(dl), func() { cut(errBudgetMoved) })
		})
		rep, err := td.Stop(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		assert.Equal(t, VerdictStoppedByControl, rep.Device(0).Verdict)
		h := rep.Step("holders")
		require.NotNil(t, h)
		assert.InDelta(t, 5*time.Second, h.Duration, float64(100*time.Millisecond), "the holder wait ended as the holder closed")
		fb := rep.Step("control fallback")
		require.NotNil(t, fb)
		assert.InDelta(t, 15*time.Second, fb.Start.Sub(start), float64(100*time.Millisecond), "the fallback at its new point")
		kill := rep.Step("kill daemon")
		require.NotNil(t, kill)
		assert.InDelta(t, 18*time.Second, kill.Start.Sub(start), float64(100*time.Millisecond), "the kill at its new point")
	})
}

// A Stop with no deadline is given its first by Tighten: the stages are
// laid out inside it, and the hung daemon's device is stopped through the
// control device before it, where Stop would have waited on with no
// fallback and no kill planned.
func TestTightenGivesAStopWithoutADeadlineItsStages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		ctl := &memControl{tree: f.tree, d: d, stopIn: 200 * time.Millisecond}
		td, err := New(d, f.config(vulnerable, ctl, Config{}))
		require.NoError(t, err)
		start := time.Now()
		ctx, cut := context.WithCancelCause(context.Background())
		dl := start.Add(10 * time.Second)
		time.AfterFunc(time.Second, func() {
			assert.True(t, td.Tighten(dl))
			time.AfterFunc(time.Until(dl), func() { cut(errBudgetMoved) })
		})
		rep, err := td.Stop(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"request", "STOP_DEV 0", "kill", "exit killed", "DEL_DEV 0"}, d.Events())
		assert.Equal(t, VerdictStoppedByControl, rep.Device(0).Verdict)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
}
