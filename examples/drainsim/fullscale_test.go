package main

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// drainsim's scenario at AgentENV's full scale, in virtual time: grace 3600 s, 200 running
// sandboxes of the examples' fake runtime whose pauses take 1-3 s alone and share the
// node's disk as drainsim's do (-pause-share 4: 4 at full speed), 24 h timeouts, a device
// daemon step of 1 s, drainkit's limit adaptive as sandboxd's is by default. kubeletsim
// terminates the in-process node exactly as the kubelet would; an hour passes in
// milliseconds.
//
// Fault: the pauses shared nothing here, each a timer, and drainkit ran 16 at a time,
// fixed, where drainsim (which prints that this is its scenario at full scale) shares
// the disk and adapts: 200 pauses took the preserve phase less time than the disk
// needs to write them (400 GiB or so at 4 GiB/s).
func TestFullScaleInVirtualTime(t *testing.T) {
	const grace, n = 3600 * time.Second, 200
	t.Run("seed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			preserved, tl, _ := fullScale(t, modeSeed, grace, n)
			t.Logf("seed: %d/%d preserved\n%s", preserved, n, tl)
			assert.True(t, tl.HookKept, "the preStop loop ran the whole hour")
			assert.True(t, tl.Killed)
			assert.LessOrEqual(t, preserved, 2, "2 s after SIGTERM, one 1-3 s pause at a time")
		})
	})
	t.Run("drainkit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			preserved, tl, rep := fullScale(t, modeDrainkit, grace, n)
			t.Logf("drainkit: %d/%d preserved, headroom %v\n%s", preserved, n, tl.Headroom(), tl)
			assert.Equal(t, n, preserved)
			assert.False(t, tl.Killed)
			assert.GreaterOrEqual(t, tl.Headroom(), 30*time.Second)
			require.NotNil(t, rep)
			assert.Zero(t, rep.Lost())
			assert.Equal(t, drain.OK, rep.Phase("ublk").Result)
			took, disk := rep.Phase(drain.PhasePreserve).Duration, diskTime(t, n)
			t.Logf("preserve phase %v, limit %d at the end, %d learned; the disk writes the %d pauses in %v",
				took, rep.Preserve.Limit, rep.Preserve.LearnedLimit, n, disk)
			assert.GreaterOrEqual(t, took, disk, "the pauses share the disk: no faster than it writes them")
		})
	})
}

// fullScaleSeed seeds the sandbox IDs of both full-scale runs, as drainsim's -id-seed.
const fullScaleSeed = 7

// fullScaleFake is the full-scale node's runtime: pauses of 1-3 s alone (2 s ±50%),
// sharing the disk as drainsim's default -pause-share does.
func fullScaleFake(dir string) *sandbox.Fake {
	f := &sandbox.Fake{Dir: dir, PauseLatency: 2 * time.Second, Jitter: 0.5}
	f.SharePauses(defaultPauseShare)
	return f
}

// diskTime is how long the full-scale node's disk takes to write the pauses of the first
// n sandboxes a node seeded with fullScaleSeed creates, at its whole bandwidth.
func diskTime(t *testing.T, n int) time.Duration {
	st, err := store.Open(filepath.Join(t.TempDir(), "records"))
	require.NoError(t, err)
	fake := fullScaleFake(filepath.Join(t.TempDir(), "images"))
	node, _, err := sandbox.NewNode(fake, st, nil)
	require.NoError(t, err)
	defer node.Close()
	node.SeedIDs(fullScaleSeed)
	var bytes int64
	for range n {
		info, err := node.Create(t.Context(), 86400)
		require.NoError(t, err)
		bytes += fake.Size(info.ID)
	}
	return time.Duration(float64(bytes) / (defaultPauseShare * sandbox.FakeBytesPerSecond) * float64(time.Second))
}

// fullScale runs one termination and returns how many sandboxes were recorded paused
// before SIGKILL was due, the timeline and (drainkit) the Report.
func fullScale(t *testing.T, mode string, grace time.Duration, n int) (int, *kubeletsim.Timeline, *drain.Report) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	node, _, err := sandbox.NewNode(fullScaleFake(filepath.Join(dir, "images")), st, nil)
	require.NoError(t, err)
	node.SeedIDs(fullScaleSeed) // the same sandboxes, and so pause times, in both runs
	defer node.Close()
	for range n {
		_, err := node.Create(t.Context(), 86400)
		require.NoError(t, err)
	}
	proc := kubeletsim.NewInProcess()
	killed, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-proc.Killed():
			cancel() // SIGKILL: nothing more happens in the process
		case <-killed.Done():
		}
	}()
	stopDaemon := func(ctx context.Context) error {
		select {
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	var hook kubeletsim.Hook
	var rep *drain.Report
	if mode == modeSeed {
		hook = kubeletsim.HookFunc(func(ctx context.Context) error {
			for node.Count(sandbox.Running) > 0 {
				select {
				case <-time.After(3 * time.Second):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		go func() {
			defer proc.Exit()
			<-proc.Signals()
			sbs, _ := node.Running(killed)
			for _, sb := range sbs {
				if sb.Preserve(killed) != nil {
					return
				}
			}
			_ = stopDaemon(killed)
		}()
	} else {
		budget, err := deadline.New(grace, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{
			Budget:    budget,
			Sandboxes: pause.ListFunc(node.Running),
			// The first estimate is the longest a pause takes alone (2 s x 1.5), as
			// sandboxd's is, and the limit adapts up to sandboxd's ceiling, as its
			// -concurrency 0 (drainsim's default) makes it.
			Pause: pause.Config{MaxLimit: 32, Estimator: deadline.NewEstimator(3 * time.Second)},
			Steps: []drain.Step{drain.NewStep(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(30 * time.Second), Critical: true},
				func(ctx context.Context) (any, error) { return nil, stopDaemon(ctx) })},
		})
		require.NoError(t, err)
		hook = kubeletsim.HandlerHook{Handler: d.PreStop(), Path: "/drain"}
		go func() {
			defer proc.Exit()
			rep = d.ServeSignals(killed, proc.Signals())
		}()
	}
	tl, err := kubeletsim.Terminate(context.Background(), proc, hook, grace)
	require.NoError(t, err)
	synctest.Wait()
	recs, _, err := st.Load()
	require.NoError(t, err)
	preserved := 0
	for _, r := range recs {
		if !r.PausedAt.After(tl.KillDue) {
			preserved++
		}
	}
	return preserved, tl, rep
}
