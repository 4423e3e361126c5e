package learned

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/durable"
	"github.com/drainkit/drainkit/pause"
)

// File is the name of the rates file in a server's state directory.
const File = "learned-rates.json"

// Rates are what a server learned about its own shutdown, and what its
// plan is made of: the estimate of one preserve, the concurrency (at the
// end of the shutdown, the one learned best, and the ceiling of an
// adaptive limit), and the budget and step
// reserves the server plans with. A server writes them at
// shutdown and loads the estimate at start; drainkit plan reads them.
type Rates struct {
	// Written is when the server wrote the file.
	Written time.Time `json:"written"`
	// Estimate is the Estimator's estimate of one preserve: max(mean,
	// p90) of the last observations. It is what the plan reserves per
	// round of Limit preserves, and the prior the server starts with.
	Estimate time.Duration `json:"estimate_ns"`
	// Mean and P90 are the Estimator's exponentially weighted mean and
	// 90th percentile, Observations how many preserves it measured in
	// the process that wrote the file, or, where that process measured
	// none and started from them, in the one that measured these (Save
	// keeps them); zero: Estimate is still a prior, its writer's, which
	// no server starts from (Start.Config starts from its own Prior).
	Mean         time.Duration `json:"mean_ns"`
	P90          time.Duration `json:"p90_ns"`
	Observations int           `json:"observations"`
	// Limit is how many preserves ran at once at the end of the last
	// shutdown: drainkit plan's concurrency. It may be a probe, or the
	// start of a Run that measured nothing: a server does not start from
	// it.
	Limit int `json:"limit"`
	// LearnedLimit is the concurrency a shutdown's adaptive limit measured
	// best on this node (pause.Report.LearnedLimit), kept from an earlier
	// shutdown when the last one learned none (a fixed limit, too few
	// sandboxes to compare two limits); zero when none ever did, as in a
	// file written before the field existed. A server starts its adaptive
	// limit from it with the Estimate beside it (pause.Config.Limit with a
	// MaxLimit): the first epoch checks it against that estimate.
	LearnedLimit int `json:"learned_limit,omitempty"`
	// LearnedEstimate is the estimate of one preserve at LearnedLimit,
	// measured by the shutdown that learned it (FromReport: its preserves
	// that ran beside about that many, else its whole Estimate), kept with
	// it: what the next adaptive start's Estimator starts from, which its
	// first epoch checks the level against and its plan reserves rounds
	// at. A later shutdown at a fixed limit measures its
	// preserves at that limit, not at the level, and writes its own
	// Estimate beside it. Zero in a file written before the field existed:
	// see Level. A file written before the estimate was measured at the
	// level holds the whole drain's, longer where it climbed past the
	// level: it reads as it is, and the next drain that learns a level
	// replaces it.
	LearnedEstimate time.Duration `json:"learned_estimate_ns,omitempty"`
	// LearnedMean is the plain mean of the same preserves at LearnedLimit
	// (or the whole drain's Mean where LearnedEstimate is the whole
	// drain's), kept with the level and its estimate: what one preserve
	// takes there on average, which drainkit plan predicts the preserve
	// phase with, where LearnedEstimate (max of mean and p90) is what the
	// drain reserves. Zero in a file written before the field existed:
	// the plan then predicts with the estimate, longer (drainsim -warm:
	// 4.05 s predicted at 1.35 s a round, 2.44 s measured).
	LearnedMean time.Duration `json:"learned_mean_ns,omitempty"`
	// MaxLimit is the ceiling of the server's adaptive limit
	// (pause.Config.MaxLimit): set, the server adapts, and its next drain
	// starts as pause.Config{Limit: LearnedLimit, MaxLimit: MaxLimit}
	// does (the Preserver's start, then the learned level), which drainkit
	// plan predicts; zero, the server's limit is fixed at Limit. It is the
	// running server's: written at shutdown, and rewritten at a server's
	// start (Server.Start) when its -concurrency says otherwise, as after
	// an upgrade from a build that wrote no MaxLimit (only limit) or a
	// change of the flag.
	MaxLimit int `json:"max_limit,omitempty"`
	// Grace and Margin are the budget's: the grace period the server was
	// started with and the margin it keeps before SIGKILL.
	Grace  time.Duration `json:"grace_ns"`
	Margin time.Duration `json:"margin_ns"`
	// KubeletGrace is the grace the server's drain takes the kubelet to
	// give the pod when it terminates it on its own (graceful node
	// shutdown: drain.Config.KubeletGrace, the server's -kubelet-grace),
	// so that drainkit plan plans that termination too; zero when the
	// server knows none (no flag, or no API access to tell such a
	// termination from a deletion), as in a file written before the field
	// existed.
	KubeletGrace time.Duration `json:"kubelet_grace_ns,omitempty"`
	// Steps are the teardown steps after the preserve phase, in order,
	// with their reserves.
	Steps []Step `json:"steps,omitempty"`
}

// A Step is one teardown step of the plan.
type Step struct {
	Name     string        `json:"name"`
	Reserve  time.Duration `json:"reserve_ns"`
	Critical bool          `json:"critical,omitempty"`
}

// FromReport sets LearnedLimit from the Report of the shutdown's
// Preserver (nil: none ran), with the estimate and the mean of one
// preserve at that level as its LearnedEstimate and LearnedMean, keeping
// the level learned before with its estimate and mean (prev's Level and
// LevelMean; prev is the file read at start, nil: none) when this
// shutdown learned none, and Limit from the Report's limit at the end
// when there is one.
//
// The estimate and the mean at the level are made of the Report's
// preserves that ran beside about as many in flight as the level (from
// three quarters of it up), each scaled to the level, so that none counts
// shorter than it would have taken there (see level.go); with fewer of
// them than a round of the level (and than 4) they are r.Estimate and
// r.Mean, the whole drain's (call FromEstimator first), no shorter where
// the drain climbed past the level. The whole drain's mixes preserves that ran beside more than
// the level (a climb past it) and the tail's that ran nearly alone: in
// drainsim -warm it was 1.80 s at level 8, where a pause at 8 takes at
// most about 1.5 s, and the next drain's plan reserved 3 rounds at it.
func (r *Rates) FromReport(rep *pause.Report, prev *Rates) {
	if prev != nil {
		r.LearnedLimit, r.LearnedEstimate = prev.Level()
		r.LearnedMean = prev.LevelMean()
	}
	if rep == nil {
		return
	}
	if k := rep.LearnedLimit; k > 0 {
		r.LearnedLimit, r.LearnedEstimate, r.LearnedMean = k, r.Estimate, r.Mean
		if est, mean, n := atLevel(rep, k); n >= minAtLevel(k) {
			r.LearnedEstimate, r.LearnedMean = est, mean
		}
	}
	if rep.Limit > 0 {
		r.Limit = rep.Limit
	}
}

// Level returns the concurrency learned best and the estimate of one
// preserve it was learned with, which an adaptive start's first epoch
// checks it against; 0 and 0 when none was learned, or when no estimate
// measured at the level is known: a file written before LearnedEstimate
// existed has one only when its writer adapted (MaxLimit), and its
// Estimate then is an adaptive drain's.
func (r *Rates) Level() (int, time.Duration) {
	switch {
	case r.LearnedLimit <= 0:
		return 0, 0
	case r.LearnedEstimate > 0:
		return r.LearnedLimit, r.LearnedEstimate
	case r.MaxLimit > 0 && r.Estimate > 0:
		return r.LearnedLimit, r.Estimate
	}
	return 0, 0
}

// LevelMean returns the mean time of one preserve at the level Level
// returns, measured with its estimate (LearnedMean), never above that
// estimate; 0 when Level returns none, or the file keeps no mean at the
// level (written before LearnedMean existed, or its level read from
// MaxLimit): drainkit plan then predicts with the estimate.
func (r *Rates) LevelMean() time.Duration {
	level, est := r.Level()
	if level == 0 || r.LearnedMean <= 0 || r.LearnedEstimate <= 0 {
		return 0
	}
	return min(r.LearnedMean, est)
}

// FromEstimator fills the estimate fields from e.
func (r *Rates) FromEstimator(e *deadline.Estimator) {
	r.Estimate, r.Mean, r.P90, r.Observations = e.Estimate(), e.Mean(), e.Quantile(0.9), e.Count()
}

// StepsOf returns the plan steps of phases, evaluating each reserve now.
func StepsOf(phases ...deadline.Phase) []Step {
	out := make([]Step, 0, len(phases))
	for _, ph := range phases {
		var r time.Duration
		if ph.Reserve != nil {
			r = ph.Reserve()
		}
		out = append(out, Step{Name: ph.Name, Reserve: r, Critical: ph.Critical})
	}
	return out
}

// Phases returns the steps as plan phases with fixed reserves.
func (r *Rates) Phases() []deadline.Phase {
	out := make([]deadline.Phase, 0, len(r.Steps))
	for _, s := range r.Steps {
		out = append(out, deadline.Phase{Name: s.Name, Reserve: deadline.Fixed(s.Reserve), Critical: s.Critical})
	}
	return out
}

// Write writes r to path atomically and durably (durable.WriteFile): a
// crash leaves the old rates or the new ones.
func (r *Rates) Write(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, append(data, '\n'), 0o644)
}

// ErrNone is returned (wrapped) by Read when the file does not exist: the
// server has not shut down yet with this state directory.
var ErrNone = errors.New("no learned rates yet")

// Read reads the rates at path. A missing file is ErrNone; a file that is
// not valid rates is an error naming the path and the field.
func Read(path string) (*Rates, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrNone)
	}
	if err != nil {
		return nil, err
	}
	var r Rates
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: not readable as learned rates (cut short by a crash or a full disk?): "+
			"remove it, and the server's next shutdown writes it anew", path, err)
	}
	switch {
	case r.Estimate < 0:
		return nil, fmt.Errorf("%s: estimate_ns is negative", path)
	case r.Mean < 0:
		return nil, fmt.Errorf("%s: mean_ns is negative", path)
	case r.P90 < 0:
		return nil, fmt.Errorf("%s: p90_ns is negative", path)
	case r.Observations < 0:
		return nil, fmt.Errorf("%s: observations is negative", path)
	case r.Limit < 0:
		return nil, fmt.Errorf("%s: limit is negative", path)
	case r.LearnedLimit < 0:
		return nil, fmt.Errorf("%s: learned_limit is negative", path)
	case r.LearnedEstimate < 0:
		return nil, fmt.Errorf("%s: learned_estimate_ns is negative", path)
	case r.LearnedMean < 0:
		return nil, fmt.Errorf("%s: learned_mean_ns is negative", path)
	case r.MaxLimit < 0:
		return nil, fmt.Errorf("%s: max_limit is negative (0: a fixed limit)", path)
	case r.Grace < 0 || r.Margin < 0 || r.KubeletGrace < 0:
		return nil, fmt.Errorf("%s: grace_ns, margin_ns and kubelet_grace_ns must not be negative", path)
	case r.Written.IsZero() && r.Estimate == 0 && r.Limit == 0 && r.Grace == 0 && len(r.Steps) == 0:
		// JSON of another kind (a drain's last-shutdown.json given for
		// this one) decodes to empty rates, which would plan with the
		// defaults and say nothing.
		return nil, fmt.Errorf("%s: no rates in it (no written, estimate_ns, limit, grace_ns or steps): not a %s a server wrote "+
			"(a drain's Report is read by drainkit report)", path, File)
	}
	for i, s := range r.Steps {
		if s.Name == "" || s.Reserve < 0 {
			return nil, fmt.Errorf("%s: steps[%d] needs a name and a non-negative reserve_ns", path, i)
		}
	}
	return &r, nil
}

// StartLimit returns the limit a Preserver built with cfg starts its first
// Run at: the limit a Run of no sandboxes reports. pause exports no name
// for it, and Preserver.Limit says something else: what a reserve may
// count on, 1 for an adaptive limit until a Run has measured a preserve.
// drainkit plan prints the start, and the mix benchmarks compare the
// adaptive limit with a fixed limit at it.
func StartLimit(cfg pause.Config) (int, error) {
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }), cfg)
	if err != nil {
		return 0, err
	}
	return p.Run(context.Background(), time.Time{}).Limit, nil
}
