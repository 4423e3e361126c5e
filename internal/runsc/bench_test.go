//go:build linux

package runsc

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/drainkit/drainkit/internal/mixbench"
	"github.com/drainkit/drainkit/pause"
)

// BenchmarkCheckpointConcurrency checkpoints 8 running counter sandboxes with real runsc,
// once one at a time (the seed's way) and once 4 at a time, and reports both wall times and
// their ratio. Starting the sandboxes is not timed.
//
//	go test -run '^$' -bench CheckpointConcurrency -benchtime 1x ./internal/runsc
func BenchmarkCheckpointConcurrency(b *testing.B) {
	rt := realRuntime(b)
	dir := b.TempDir()
	bundles := counterBundles(b, dir, 8)
	var seq, par time.Duration
	round := 0
	for b.Loop() {
		round++
		seq += checkpointAll(b, rt, bundles, fmt.Sprint(dir, "/r", round, "c1"), 1)
		par += checkpointAll(b, rt, bundles, fmt.Sprint(dir, "/r", round, "c4"), 4)
	}
	b.ReportMetric(seq.Seconds()/float64(round), "s/8-checkpoints-c1")
	b.ReportMetric(par.Seconds()/float64(round), "s/8-checkpoints-c4")
	b.ReportMetric(float64(seq)/float64(par), "speedup-c4/c1")
}

// counterBundles writes n counter sandboxes' bundles, b0 to bN-1, in dir.
func counterBundles(b *testing.B, dir string, n int) []Bundle {
	b.Helper()
	bundles := make([]Bundle, n)
	for i := range bundles {
		var err error
		if bundles[i], err = WriteBundle(filepath.Join(dir, fmt.Sprint("b", i)), CounterArgs()); err != nil {
			b.Fatal(err)
		}
	}
	return bundles
}

// checkpointAll starts a sandbox per bundle (untimed), checkpoints them all with the given
// concurrency (timed), deletes them and returns the checkpoint phase's wall time.
func checkpointAll(b *testing.B, rt *Runtime, bundles []Bundle, imgDir string, concurrency int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.StopTimer()
	for i, bd := range bundles {
		id := containerID(fmt.Sprint("s", i))
		if err := rt.Run(ctx, id, bd, imgDir+".log"); err != nil {
			b.Fatal(err)
		}
	}
	for _, bd := range bundles {
		waitCounter(b, bd, 0)
	}
	b.StartTimer()
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(concurrency)
	for i := range bundles {
		id := containerID(fmt.Sprint("s", i))
		g.Go(func() error { return rt.Checkpoint(ctx, id, filepath.Join(imgDir, id)) })
	}
	err := g.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for i := range bundles {
		if err := rt.Delete(ctx, containerID(fmt.Sprint("s", i)), true); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	return elapsed
}

// checkpointed is a sandbox preserved by a real runsc checkpoint.
type checkpointed struct {
	rt  *Runtime
	id  string
	img string
}

func (c *checkpointed) ID() string { return c.id }
func (c *checkpointed) Preserve(ctx context.Context) error {
	return c.rt.Checkpoint(ctx, c.id, c.img)
}

// BenchmarkPreserveRunscMix is the CPU-bound mix: 6 running counter
// sandboxes checkpointed by real runsc through the adaptive default
// Preserver and through fixed limits 1, 2, 4 and 8 (16 and 32 would run
// the same 6 at once as 8), side by side in one run. Starting the
// sandboxes is not timed. It reports x-best-fixed-cpu.
//
//	go test -run '^$' -bench PreserveRunscMix -benchtime 1x ./internal/runsc
func BenchmarkPreserveRunscMix(b *testing.B) {
	rt := realRuntime(b)
	dir := b.TempDir()
	bundles := counterBundles(b, dir, 6)
	ctx := context.Background()
	runs, live := 0, false
	reset := func() error {
		if live {
			for i := range bundles {
				if err := rt.Delete(ctx, containerID(fmt.Sprint("s", i)), true); err != nil {
					return err
				}
			}
			live = false
		}
		return nil
	}
	mk := func() ([]pause.Sandbox, error) {
		runs++
		img := fmt.Sprint(dir, "/img", runs)
		sbs := make([]pause.Sandbox, len(bundles))
		for i, bd := range bundles {
			id := containerID(fmt.Sprint("s", i))
			if err := rt.Run(ctx, id, bd, img+".log"); err != nil {
				return nil, err
			}
			live = true
			waitCounter(b, bd, 0)
			sbs[i] = &checkpointed{rt: rt, id: id, img: filepath.Join(img, id)}
		}
		return sbs, nil
	}
	var sum mixbench.Comparison
	for b.Loop() {
		c, err := mixbench.Compare(ctx, 1, sum.Rounds, mk, reset, []int{1, 2, 4, 8}, pause.Config{})
		if err != nil {
			b.Fatal(err)
		}
		sum.Add(c)
	}
	sum.Report(b, "cpu")
}
