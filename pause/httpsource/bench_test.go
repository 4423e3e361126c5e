package httpsource

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/drainkit/drainkit/pause"
)

// BenchmarkOneAtATimeServer preserves 16 sandboxes over real loopback HTTP
// against a server that pauses one at a time (2 ms each), at Preserver limit
// 1 (the baseline) and 8, in the same run. It reports the makespan ratio
// limit-8 / limit-1 (at most about 1: concurrency must not make things
// worse) and the 429 answers per run at limit 8.
func BenchmarkOneAtATimeServer(b *testing.B) {
	for _, bc := range []struct {
		name string
		mode serial
	}{{"reject", reject}, {"block", block}} {
		b.Run(bc.name, func(b *testing.B) {
			var base, wide time.Duration
			var rejected int
			for b.Loop() {
				d, _ := preserveAll(b, bc.mode, 1)
				base += d
				d, r := preserveAll(b, bc.mode, 8)
				wide += d
				rejected += r
			}
			b.ReportMetric(float64(wide)/float64(base), "makespan-8/1")
			b.ReportMetric(float64(rejected)/float64(b.N), "429s/run")
		})
	}
}

func preserveAll(b *testing.B, mode serial, limit int) (time.Duration, int) {
	const n = 16
	f := newFakeServer(n, func(f *fakeServer) { f.pauseDelay, f.serial = 2*time.Millisecond, mode })
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	src, err := New(srv.URL, Config{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := pause.New(src, pause.Config{Limit: limit})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	rep := p.Run(ctx, time.Time{})
	d := time.Since(start)
	if rep.Counts[pause.Preserved] != n {
		b.Fatalf("limit %d: preserved %d of %d", limit, rep.Counts[pause.Preserved], n)
	}
	rejected, _ := f.stats()
	return d, rejected
}
