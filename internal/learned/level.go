package learned

import (
	"slices"
	"sort"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// The estimate of one preserve at a learned level, from a Run's Report.
//
// A Run that learned a level k measured its preserves at every limit it
// tried: a climb from 8 to 16 on a disk that writes 4 at full speed
// measured some at 8, the most at 16 (each half as fast), and the tail's
// nearly alone. The Estimator's estimate is over all of them, and the
// plan of the next drain reserves rounds of k at it: in drainsim -warm
// 3 rounds of 8 at 1.80 s, where a pause at 8 takes at most 1.5 s.
//
// Each entry's Start and Duration give k̄, the mean number of preserves
// in flight over its run (the climber's sample, pause/limit.go, here from
// the entries). What one would have taken at k is bounded by what the
// level means. Throughput does not fall as preserves are added up to k
// (k is the fewest at once the climber measured to deliver the best,
// within payFrac), so one that ran beside fewer (k̄ < k) would have
// taken at most k/k̄ as long at k. Throughput does not grow past k by
// more than payFrac (the same measurement), so one that ran beside more
// took at least k̄/k·(1+payFrac)⁻¹ of its time at k. Scaled so, every
// preserve counts as at least as long as it would have taken at k, and
// the scale is near 1 near k.
//
// Only the preserves whose k̄ was at least levelFloor of k count: the
// bound k/k̄ is loose far below k (a tail preserve that ran alone on a
// disk with its knee at 4 took half its time at 8, and would count eight
// times it), and the climber steps a quarter (its probes) around a level
// it holds. Preserves above k need no such cut: the climber's limit
// never went past the levels it measured, and throughput there is what
// it measured. The preserves counted are the climber's samples:
// preserved at their first attempt, not preserved again (Relisted); the
// in-flight count is of every entry with one attempt, whose Start and
// Duration are that attempt's (an entry retried spans its backoffs too,
// and counted would have a preserve beside it look busier than it was:
// left out, the count is lower, which only scales that preserve up).
//
// The estimate is the Estimator's rule (deadline.Estimator: max of the
// exponentially weighted mean and the 90th percentile) over the scaled
// durations, observed in the order the preserves ended, as the Run's
// Estimator observed them. With fewer than minAtLevel(k) preserves
// counted it is not made: the sample would be part of a round, and the
// whole drain's estimate is kept (it is at least as long where the drain
// climbed past k, as a round of faster preserves is shorter).
const (
	levelFloor = 0.75 // the fewest in flight, as a share of the level, a preserve counted ran beside
	payFrac    = 0.05 // the climber's: a level that delivers less than this much more does not pay (pause/adapt.go)
	minRound   = 4    // the climber's smallest epoch (pause/adapt.go minEpochWidth)
)

// minAtLevel is how many preserves measured at level k an estimate at k
// is made of at least: a round's worth, and never fewer than the
// climber's smallest epoch.
func minAtLevel(k int) int { return max(k, minRound) }

// atLevel returns the estimate of one preserve at k preserves in flight
// that rep's entries give (see the comment above), the mean of the same
// scaled preserves (what one takes at k on average: what drainkit plan
// predicts with, where the estimate is what it reserves), and how many
// preserves both are made of; zeros when none ran beside levelFloor of k
// or more.
//
// The mean is the plain mean of the sample, not the Estimator's
// exponentially weighted one: observed in the order they ended, the
// longest preserves of a Run end last and weigh the most (drainsim -warm:
// 1.25 s weighted, 0.95 s plain, for pauses at 8 that took 0.99 s in the
// next drain), where the Estimator weighs the last ones to follow a node
// that changes during a drain.
func atLevel(rep *pause.Report, k int) (est, mean time.Duration, n int) {
	if rep == nil || k <= 0 {
		return 0, 0, 0
	}
	var t0 time.Time
	for _, e := range rep.Entries {
		if !e.Start.IsZero() && (t0.IsZero() || e.Start.Before(t0)) {
			t0 = e.Start
		}
	}
	// The in-flight integral up to t, from the spans' starts and ends in
	// order: Σ(t - s) over the starts before t less Σ(t - e) over the ends.
	var starts, ends []float64
	for _, e := range rep.Entries {
		if inFlight(e) {
			s := float64(e.Start.Sub(t0))
			starts, ends = append(starts, s), append(ends, s+float64(e.Duration))
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	sumS, sumE := prefix(starts), prefix(ends)
	area := func(t float64) float64 {
		i := sort.SearchFloat64s(starts, t)
		j := sort.SearchFloat64s(ends, t)
		return float64(i)*t - sumS[i] - (float64(j)*t - sumE[j])
	}
	type sample struct {
		end time.Time
		d   time.Duration
	}
	var at []sample
	for _, e := range rep.Entries {
		if !measured(e) {
			continue
		}
		s := float64(e.Start.Sub(t0))
		d := float64(e.Duration)
		kbar := (area(s+d) - area(s)) / d
		if kbar < levelFloor*float64(k) {
			continue
		}
		scale := float64(k) / kbar
		if kbar > float64(k) {
			scale *= 1 + payFrac
		}
		at = append(at, sample{e.Start.Add(e.Duration), time.Duration(d * scale)})
	}
	slices.SortStableFunc(at, func(a, b sample) int { return a.end.Compare(b.end) })
	e := deadline.NewEstimator(0)
	var sum float64
	for _, s := range at {
		e.Observe(s.d)
		sum += float64(s.d)
	}
	if len(at) == 0 {
		return 0, 0, 0
	}
	return e.Estimate(), time.Duration(sum / float64(len(at))), len(at)
}

// inFlight reports whether e's Start and Duration are one attempt's run,
// counted in flight.
func inFlight(e pause.Entry) bool { return !e.Start.IsZero() && e.Duration > 0 && e.Attempts == 1 }

// measured reports whether e is a sample of a preserve's time, as the
// climber takes one: preserved at its first attempt, and not again.
func measured(e pause.Entry) bool {
	return inFlight(e) && e.Outcome == pause.Preserved && e.Relisted == 0
}

// prefix returns the sums of v's first i elements, for i from 0 to len(v).
func prefix(v []float64) []float64 {
	out := make([]float64, len(v)+1)
	for i, x := range v {
		out[i+1] = out[i] + x
	}
	return out
}
