package pause

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Fault: a Tighten that loaded the Run in progress just before Run stopped
// being it (Run's CompareAndSwap of p.cur) and took the run's lock just
// after finish read the hard deadline reported that it moved it, and the
// Report, already made, gave the old one; it also armed a cut nothing
// stopped. Row 623 closed the window around the "run finished" line, not
// this one between Tighten's Load and its lock. The run's account made,
// tighten now moves nothing. docs/faults.md row 740.
//
// The test takes the interleaving step by step: Tighten's Load, Run's
// CompareAndSwap and finish, then Tighten's lock.
func TestTightenLoadedBeforeTheReportIsMadeMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(ListFunc(func(context.Context) ([]Sandbox, error) { return nil, nil }), Config{})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), t0.Add(10*time.Second))
		defer cancel()
		r := p.newRun(ctx, t0.Add(60*time.Second))
		r.begin(ctx, t0.Add(60*time.Second)) // as Run does, after it defers close
		loaded := p.cur.Load()               // Tighten's Load, as Run is about to make its Report
		p.cur.CompareAndSwap(r, nil)
		rep := r.finish()
		moved := loaded.tighten(t0.Add(30 * time.Second))
		r.close()
		if moved {
			t.Errorf("tighten of a run whose Report was made reported a move; the Report's Hard is +%v", rep.Hard.Sub(t0))
		}
		if !rep.Hard.Equal(t0.Add(60 * time.Second)) {
			t.Errorf("Report.Hard +%v, want +60s", rep.Hard.Sub(t0))
		}
	})
}
