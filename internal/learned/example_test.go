package learned_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/deadline"
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

// teardownStep stands for a drain.Step: it has the plan phase of a step.
type teardownStep struct{ phase deadline.Phase }

func (s teardownStep) Phase() deadline.Phase { return s.phase }

// The wiring of the package documentation, at shutdown and at start.
func Example_wiring() {
	stateDir, _ := os.MkdirTemp("", "state")
	defer os.RemoveAll(stateDir)
	limit, grace, margin := 8, 30*time.Second, 3*time.Second
	step := teardownStep{deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second)}}
	estimator := deadline.NewEstimator(time.Second)
	estimator.Observe(2 * time.Second)
	preserved := &pause.Report{Limit: 8} // a drain too short to compare two limits
	last := &learned.Rates{LearnedLimit: 16}
	{
		// at shutdown
		r := learned.Rates{Written: time.Now(), Limit: limit, Grace: grace, Margin: margin,
			Steps: learned.StepsOf(step.Phase())}
		r.FromEstimator(estimator)
		r.FromReport(preserved, last) // the learned limit; the one before when this drain learned none
		err := r.Write(filepath.Join(stateDir, learned.File))
		fmt.Println(err)
	}
	configured, ceiling := 500*time.Millisecond, 32
	{
		// at start
		prior, cfg := configured, pause.Config{} // the adaptive limit, from 8
		if last, err := learned.Read(filepath.Join(stateDir, learned.File)); err == nil {
			if last.Estimate > 0 {
				prior = last.Estimate
			}
			if last.LearnedLimit > 0 { // checked against the estimate by the first epoch
				cfg.Limit, cfg.MaxLimit = min(last.LearnedLimit, ceiling), ceiling
			}
		}
		cfg.Estimator = deadline.NewEstimator(prior)
		fmt.Println(cfg.Limit, cfg.MaxLimit, cfg.Estimator.Estimate())
	}
	// Output:
	// <nil>
	// 16 32 2s
}
