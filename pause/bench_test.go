package pause_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"

	"github.com/drainkit/drainkit/pause"
)

// noop is a sandbox whose Preserve does nothing: what is measured is the
// Preserver's own cost per sandbox.
type noop string

func (n noop) ID() string                       { return string(n) }
func (noop) Preserve(ctx context.Context) error { return nil }

// noops returns n no-op sandboxes and a Lister that, as a node would,
// lists all of them at the first listing of a Run and none at the second,
// once they are preserved: a Run makes these two listings, so the Lister
// alternates (a node listing a preserved sandbox again has it preserved
// again).
func noops(n int) ([]pause.Sandbox, pause.Lister) {
	list := make([]pause.Sandbox, n)
	for i := range list {
		list[i] = noop("sb-" + strconv.Itoa(i))
	}
	var listings atomic.Int64
	return list, pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		if listings.Add(1)%2 == 0 {
			return nil, nil
		}
		return list, nil
	})
}

// cost is wall-clock and CPU time (user + system, all threads: workers
// and garbage collector included).
type cost struct{ wall, cpu time.Duration }

func measure(f func()) cost {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu0 := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	start := time.Now()
	f()
	wall := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cost{wall, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) - cpu0}
}

// BenchmarkOverhead runs N=10,000 no-op preserves through a Preserver (two
// listing passes, ordering, the full Report) and through a plain
// errgroup.SetLimit loop, alternately in the same benchmark, and reports
// both costs per sandbox, their ratios and the Preserver's allocations per
// sandbox. Tracing and metrics are the global no-op providers, as in a
// server that did not set any. The CPU-time ratio is the robust one on a
// shared machine; the wall-clock ratio is reported next to it.
func BenchmarkOverhead(b *testing.B) {
	const n, limit = 10_000, 8
	list, lister := noops(n)
	p, err := pause.New(lister, pause.Config{Limit: limit})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var ours, base cost
	var allocs uint64
	var ms runtime.MemStats
	for b.Loop() {
		runtime.GC() // each side starts with no garbage of the other's to collect
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		var rep *pause.Report
		c := measure(func() { rep = p.Run(ctx, time.Time{}) })
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - before
		ours.wall, ours.cpu = ours.wall+c.wall, ours.cpu+c.cpu
		if rep.Counts[pause.Preserved] != n {
			b.Fatalf("preserved %d of %d", rep.Counts[pause.Preserved], n)
		}

		runtime.GC()
		c = measure(func() {
			errgroupRun(b, ctx, list, limit)
		})
		base.wall, base.cpu = base.wall+c.wall, base.cpu+c.cpu
	}
	per := float64(b.N) * n
	b.ReportMetric(float64(ours.wall)/per, "ns/sandbox")
	b.ReportMetric(float64(base.wall)/per, "errgroup-ns/sandbox")
	b.ReportMetric(float64(ours.wall)/float64(base.wall), "x-errgroup-wall")
	b.ReportMetric(float64(ours.cpu)/float64(base.cpu), "x-errgroup-cpu")
	b.ReportMetric(float64(allocs)/per, "allocs/sandbox")
}

// BenchmarkOverheadTraced is BenchmarkOverhead's Preserver side with a
// recording tracer (OpenTelemetry SDK, always sampling, spans dropped) and
// an SDK meter provider: the price of a span per sandbox.
func BenchmarkOverheadTraced(b *testing.B) {
	const n, limit = 10_000, 8
	_, lister := noops(n)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	p, err := pause.New(lister, pause.Config{Limit: limit, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	var ms runtime.MemStats
	var allocs uint64
	var c cost
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		got := measure(func() { p.Run(context.Background(), time.Time{}) })
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - before
		c.wall += got.wall
	}
	per := float64(b.N) * n
	b.ReportMetric(float64(c.wall)/per, "ns/sandbox")
	b.ReportMetric(float64(allocs)/per, "allocs/sandbox")
}

// BenchmarkOverheadScale runs N = 10, 1k and 100k no-op sandboxes through
// the default Preserver (adaptive limit) and through errgroup.SetLimit(8),
// the adaptive limit's default start, alternately in the same benchmark,
// and reports for each N the CPU-time ratio x-errgroup-N (robust on a
// shared machine; the wall-clock one is x-errgroup-wall-N), the
// Preserver's nanoseconds and bytes allocated per sandbox, and errgroup's.
// Each side starts on pages returned to the OS (debug.FreeOSMemory), as a
// process's first large Run does. touch-ns/B-fresh and touch-ns/B-reused
// (touchCost) are what the machine charges per byte of memory on fresh and
// on reused pages: a 100k Run keeps about 22 MB.
//
//	go test -run '^$' -bench OverheadScale -benchtime 3x ./pause
func BenchmarkOverheadScale(b *testing.B) {
	sizes := []int{10, 1_000, 100_000}
	type side struct {
		c     cost
		bytes uint64
		runs  int
	}
	ours, base := make([]side, len(sizes)), make([]side, len(sizes))
	ctx := context.Background()
	var ms runtime.MemStats
	alloc := func() uint64 { runtime.ReadMemStats(&ms); return ms.TotalAlloc }
	// Untimed, one Run at the largest N first: the first 100k Run in a
	// process grows the heap by about 35 MB of pages the VM maps on first
	// touch (0.54 s wall and 2.1 µs of CPU per sandbox against 0.06 s and
	// 0.6 µs for the next one, measured on this VM), a cost of the process's
	// first Run, not of each sandbox; the README states it apart.
	_, warm := noops(sizes[len(sizes)-1])
	if p, err := pause.New(warm, pause.Config{}); err != nil {
		b.Fatal(err)
	} else {
		p.Run(ctx, time.Time{})
	}
	for b.Loop() {
		for i, n := range sizes {
			list, lister := noops(n)
			reps := max(1, 100_000/n) // enough sandboxes for the clock at small N
			p, err := pause.New(lister, pause.Config{})
			if err != nil {
				b.Fatal(err)
			}
			debug.FreeOSMemory() // both sides on fresh pages, as in BenchmarkOverheadReportFloor
			before := alloc()
			c := measure(func() {
				for range reps {
					if rep := p.Run(ctx, time.Time{}); rep.Counts[pause.Preserved] != n {
						b.Fatalf("preserved %d of %d", rep.Counts[pause.Preserved], n)
					}
				}
			})
			ours[i].bytes += alloc() - before
			ours[i].c.wall, ours[i].c.cpu = ours[i].c.wall+c.wall, ours[i].c.cpu+c.cpu
			ours[i].runs += reps

			debug.FreeOSMemory() // both sides on fresh pages, as in BenchmarkOverheadReportFloor
			before = alloc()
			c = measure(func() {
				for range reps {
					errgroupRun(b, ctx, list, pause.DefaultLimit)
				}
			})
			base[i].bytes += alloc() - before
			base[i].c.wall, base[i].c.cpu = base[i].c.wall+c.wall, base[i].c.cpu+c.cpu
			base[i].runs += reps
		}
	}
	for i, n := range sizes {
		per := float64(ours[i].runs) * float64(n)
		b.ReportMetric(float64(ours[i].c.cpu)/float64(base[i].c.cpu), fmt.Sprint("x-errgroup-", n))
		b.ReportMetric(float64(ours[i].c.wall)/float64(base[i].c.wall), fmt.Sprint("x-errgroup-wall-", n))
		b.ReportMetric(float64(ours[i].c.wall)/per, fmt.Sprint("ns/sandbox-", n))
		b.ReportMetric(float64(base[i].c.wall)/per, fmt.Sprint("errgroup-ns/sandbox-", n))
		b.ReportMetric(float64(ours[i].bytes)/per, fmt.Sprint("B/sandbox-", n))
		b.ReportMetric(float64(base[i].bytes)/per, fmt.Sprint("errgroup-B/sandbox-", n))
	}
	fresh, reused := touchCost()
	b.ReportMetric(fresh, "touch-ns/B-fresh")
	b.ReportMetric(reused, "touch-ns/B-reused")
}

// touchCost measures, for reading x-errgroup-100000, what this machine
// charges for the memory a Run keeps: nanoseconds per byte to allocate and
// write 16 MB (a 100k Run's Report entries) on pages the Go runtime has
// returned to the OS (fresh: faulted in again, as after the scavenger ran
// between two large Runs) and on pages the heap kept (reused), 5 times
// each, alternately.
func touchCost() (fresh, reused float64) {
	const size = 16 << 20
	var f, r time.Duration
	touch := func() time.Duration {
		start := time.Now()
		buf := make([]byte, size)
		for i := 0; i < size; i += 64 {
			buf[i] = 1
		}
		took := time.Since(start)
		runtime.KeepAlive(buf)
		return took
	}
	for range 5 {
		debug.FreeOSMemory()
		f += touch()
		runtime.GC()
		r += touch()
	}
	return float64(f) / (5 * size), float64(r) / (5 * size)
}

// BenchmarkOverheadReportFloor measures what the Report alone costs, for
// reading BenchmarkOverheadScale: the same no-op sandboxes through
// errgroup.SetLimit(8), as they are and with an errgroup that keeps, like
// Run, a Report entry per sandbox (its ID, pass, attempts, start, end,
// duration and outcome) and the counts, and through the default Preserver,
// the three alternately. It reports the CPU-time ratios x-report-floor-N
// (errgroup with the Report / errgroup: the part of x-errgroup-N that no
// scheduler keeping the Report avoids) and x-errgroup-with-report-N (the
// Preserver / errgroup with the Report: what the Preserver's scheduling
// costs over the cheapest code that keeps the same Report).
//
//	go test -run '^$' -bench OverheadReportFloor -benchtime 3x ./pause
func BenchmarkOverheadReportFloor(b *testing.B) {
	sizes := []int{10, 1_000, 100_000}
	ours, kept, base := make([]time.Duration, len(sizes)), make([]time.Duration, len(sizes)), make([]time.Duration, len(sizes))
	ctx := context.Background()
	warm, lister := noops(sizes[len(sizes)-1]) // untimed, as in BenchmarkOverheadScale
	reportingGroup(ctx, warm)
	if p, err := pause.New(lister, pause.Config{}); err != nil {
		b.Fatal(err)
	} else {
		p.Run(ctx, time.Time{})
	}
	// Every side starts on pages returned to the OS, as the first large Run
	// of a process does: a side that ran after another would otherwise
	// reuse its pages, and on this VM a fresh page costs about 15 times a
	// reused one (touch-ns/B-fresh and -reused in BenchmarkOverheadScale).
	for b.Loop() {
		for i, n := range sizes {
			list, lister := noops(n)
			reps := max(1, 100_000/n)
			p, err := pause.New(lister, pause.Config{})
			if err != nil {
				b.Fatal(err)
			}
			cpu := func(run func()) time.Duration {
				debug.FreeOSMemory()
				return measure(func() {
					for range reps {
						run()
					}
				}).cpu
			}
			preserved := func(rep *pause.Report) {
				if rep.Counts[pause.Preserved] != n {
					b.Fatalf("preserved %d of %d", rep.Counts[pause.Preserved], n)
				}
			}
			ours[i] += cpu(func() { preserved(p.Run(ctx, time.Time{})) })
			kept[i] += cpu(func() { preserved(reportingGroup(ctx, list)) })
			base[i] += cpu(func() { errgroupRun(b, ctx, list, pause.DefaultLimit) })
		}
	}
	for i, n := range sizes {
		b.ReportMetric(float64(kept[i])/float64(base[i]), fmt.Sprint("x-report-floor-", n))
		b.ReportMetric(float64(ours[i])/float64(kept[i]), fmt.Sprint("x-errgroup-with-report-", n))
	}
}

// errgroupRun is the baseline the overhead benchmarks divide by: list
// preserved through errgroup.SetLimit(limit), nothing kept.
func errgroupRun(b *testing.B, ctx context.Context, list []pause.Sandbox, limit int) {
	var g errgroup.Group
	g.SetLimit(limit)
	for _, sb := range list {
		g.Go(func() error { return sb.Preserve(ctx) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// reportingGroup preserves list through errgroup.SetLimit(8) and keeps a
// Report as Run does: one entry per sandbox, written as it ends, and the
// counts.
func reportingGroup(ctx context.Context, list []pause.Sandbox) *pause.Report {
	rep := &pause.Report{Start: time.Now(), Passes: 1, Limit: pause.DefaultLimit, Counts: make(map[pause.Outcome]int)}
	rep.Entries = make([]pause.Entry, len(list))
	var g errgroup.Group
	g.SetLimit(pause.DefaultLimit)
	for i, sb := range list {
		e := &rep.Entries[i]
		e.ID, e.Pass = sb.ID(), 1
		g.Go(func() error {
			e.Start, e.Attempts = time.Now(), 1
			err := sb.Preserve(ctx)
			e.End = time.Now()
			e.Duration, e.Outcome = e.End.Sub(e.Start), pause.Preserved
			if err != nil {
				e.Outcome, e.Error = pause.Failed, err.Error()
			}
			return err
		})
	}
	_ = g.Wait() // every error is in its entry
	for i := range rep.Entries {
		rep.Counts[rep.Entries[i].Outcome]++
	}
	rep.End = time.Now()
	return rep
}
