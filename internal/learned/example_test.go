package learned_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// A server writes what it learned at shutdown and starts from it next
// time.
func Example() {
	dir, _ := os.MkdirTemp("", "state")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, learned.File)

	est := deadline.NewEstimator(time.Second) // the configured prior
	est.Observe(250 * time.Millisecond)       // the shutdown measured one preserve
	r := learned.Rates{Written: time.Now(), Limit: 4, Grace: 30 * time.Second}
	r.FromEstimator(est)
	r.FromReport(&pause.Report{Limit: 40, LearnedLimit: 32}, nil) // the Preserver measured 32 best
	if err := r.Write(path); err != nil {
		fmt.Println(err)
		return
	}

	loaded, err := learned.Read(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	next := deadline.NewEstimator(loaded.Estimate) // the next process starts from it
	fmt.Println(next.Estimate(), loaded.Limit, loaded.LearnedLimit)
	// Output: 250ms 40 32
}

// The wiring of the package documentation: a start from what the last
// shutdown learned, and the save after this one.
func Example_wiring() {
	stateDir, _ := os.MkdirTemp("", "state")
	defer os.RemoveAll(stateDir)
	last := learned.Rates{Written: time.Now(), Estimate: 2 * time.Second, Observations: 40, Limit: 32, LearnedLimit: 16, MaxLimit: 32}
	if err := last.Write(filepath.Join(stateDir, learned.File)); err != nil {
		fmt.Println(err)
		return
	}
	concurrency, configured, logger := 0, 500*time.Millisecond, slog.New(slog.DiscardHandler)
	budget, _ := deadline.New(30*time.Second, deadline.Config{})
	var preserver *pause.Preserver
	build := func(cfg pause.Config) (err error) {
		preserver, err = pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }), cfg)
		return err
	}
	var steps []drain.Step
	rep := &drain.Report{Preserve: &pause.Report{Limit: 8}} // a drain too short to compare two limits

	start := learned.Server{Dir: stateDir, Concurrency: concurrency, Ceiling: 32,
		Prior: configured, Logger: logger}.Start()
	err := build(start.Config()) // the Preserver's Limit, MaxLimit and Estimator
	if err != nil {
		if cold, ok := start.Cold(err); ok { // what was learned no longer fits: set aside
			err = build(cold)
		}
	}
	// ... after the shutdown's Run:
	start.Save(rep, budget, steps)

	fmt.Println(err, preserver.Limit(), preserver.Estimator().Estimate())
	saved, _ := learned.Read(filepath.Join(stateDir, learned.File))
	fmt.Println(saved.Limit, saved.LearnedLimit, saved.MaxLimit)
	// Output:
	// <nil> 8 2s
	// 8 16 32
}
