package pause_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/drainkit/drainkit/pause"
)

// noop is a sandbox whose Preserve does nothing: what is measured is the
// Preserver's own cost per sandbox.
type noop string

func (n noop) ID() string                       { return string(n) }
func (noop) Preserve(ctx context.Context) error { return nil }

// BenchmarkOverhead runs N=10,000 no-op preserves through a Preserver and
// through a plain errgroup.SetLimit loop, in the same benchmark, and
// reports both costs per sandbox, their ratio and the Preserver's
// allocations per sandbox. Tracing and metrics are the global no-op
// providers, as in a server that did not set any.
func BenchmarkOverhead(b *testing.B) {
	const n, limit = 10_000, 8
	list := make([]pause.Sandbox, n)
	for i := range list {
		list[i] = noop("sb-" + strconv.Itoa(i))
	}
	lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return list, nil })
	p, err := pause.New(lister, pause.WithLimit(limit))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var ours, base time.Duration
	var allocs uint64
	var ms runtime.MemStats
	b.ReportAllocs()
	for b.Loop() {
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		ours += time.Since(start)
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - before
		if rep.Counts[pause.Preserved] != n {
			b.Fatalf("preserved %d of %d", rep.Counts[pause.Preserved], n)
		}

		start = time.Now()
		var g errgroup.Group
		g.SetLimit(limit)
		for _, sb := range list {
			g.Go(func() error { return sb.Preserve(ctx) })
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		base += time.Since(start)
	}
	runs := float64(b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/runs/n, "ns/sandbox")
	b.ReportMetric(float64(base.Nanoseconds())/runs/n, "errgroup-ns/sandbox")
	b.ReportMetric(float64(ours)/float64(base), "x-errgroup")
	b.ReportMetric(float64(allocs)/runs/n, "allocs/sandbox")
}
