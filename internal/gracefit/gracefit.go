package gracefit

import (
	"math"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// Max bounds the search for the smallest grace period that fits: far more
// than a pod is given.
const Max = 24 * time.Hour

// Shortfall is by how much the phases that phasesAt gives for a budget of
// grace, configured by c, do not fit, as drain.New counts it to refuse a
// plan: deadline.Plan.Shortfall before any event. phasesAt receives that
// budget, so a reserve that follows the grace in use (drain.NewServer's
// http step: a fortieth of it) follows this one. A budget deadline.New
// refuses (a margin not below grace, a sleep longer than it) or phases
// deadline.NewPlan refuses hold nothing: the largest Duration.
func Shortfall(grace time.Duration, c deadline.Config, phasesAt func(*deadline.Budget) []deadline.Phase) time.Duration {
	b, err := deadline.New(grace, c)
	if err != nil {
		return math.MaxInt64
	}
	p, err := deadline.NewPlan(b, phasesAt(b)...)
	if err != nil {
		return math.MaxInt64
	}
	return p.Shortfall()
}

// Smallest is the smallest whole number of seconds, up to Max, for which
// Shortfall is zero, or 0 if there is none.
func Smallest(c deadline.Config, phasesAt func(*deadline.Budget) []deadline.Phase) time.Duration {
	return SmallestWhere(func(grace time.Duration) bool { return Shortfall(grace, c, phasesAt) == 0 })
}

// SmallestWhere is the smallest whole number of seconds, up to Max, for
// which fits holds, by bisection (fits must hold for every longer grace
// once it holds for one), or 0 if it holds for none.
func SmallestWhere(fits func(grace time.Duration) bool) time.Duration {
	lo, hi := int64(0), int64(Max/time.Second)
	if !fits(time.Duration(hi) * time.Second) {
		return 0
	}
	for hi-lo > 1 { // lo does not fit, hi does
		mid := (lo + hi) / 2
		if fits(time.Duration(mid) * time.Second) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(hi) * time.Second
}
