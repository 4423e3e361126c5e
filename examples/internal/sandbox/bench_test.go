package sandbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// BenchmarkPreserveRunscCheckpoints is the node-drain path with real gVisor: 8 running
// counter sandboxes preserved by pause.Preserver (runsc checkpoint, delete, durable record)
// once with limit 1 (the seed's one-at-a-time) and once with limit 4, in the same run.
// Starting the sandboxes is not timed. It reports both wall times and their ratio.
//
//	go test -run '^$' -bench PreserveRunsc -benchtime 3x ./examples/internal/sandbox
func BenchmarkPreserveRunscCheckpoints(b *testing.B) {
	if err := runsc.Usable(); err != nil {
		b.Skip("skipping real-runsc benchmark: ", err)
	}
	var seq, par time.Duration
	rounds := 0
	for b.Loop() {
		rounds++
		seq += preserveAll(b, 1)
		par += preserveAll(b, 4)
	}
	b.ReportMetric(seq.Seconds()/float64(rounds), "s/8-preserves-limit1")
	b.ReportMetric(par.Seconds()/float64(rounds), "s/8-preserves-limit4")
	b.ReportMetric(float64(seq)/float64(par), "speedup-limit4/limit1")
}

func preserveAll(b *testing.B, limit int) time.Duration {
	b.StopTimer()
	dir := b.TempDir()
	rt := NewRunsc(dir)
	defer func() { _ = rt.Runtime.DeleteAll(context.Background()) }()
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		b.Fatal(err)
	}
	node, _, err := NewNode(rt, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for range 8 {
		info, err := node.Create(ctx, 86400)
		if err != nil {
			b.Fatal(err)
		}
		for c, err := rt.Bundle(info.ID).Counter(); err != nil || c < 1; c, err = rt.Bundle(info.ID).Counter() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	p, err := pause.New(pause.ListFunc(node.Running), pause.Config{Limit: limit})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	rep := p.Run(ctx, time.Time{})
	elapsed := time.Since(start)
	b.StopTimer()
	if rep.Counts[pause.Preserved] != 8 {
		b.Fatalf("preserved %d of 8: %+v", rep.Counts[pause.Preserved], rep.Entries)
	}
	b.StartTimer()
	return elapsed
}
