package deadline

import (
	"math"
	"sync"
	"time"
)

// estimatorWindow is how many recent observations the quantile is taken over.
const estimatorWindow = 64

// An Estimator keeps a running estimate of a duration, such as how long one
// sandbox takes to preserve, so reserves follow what was observed instead of
// a constant. Its Estimate is the larger of an exponentially weighted mean
// and the 90th percentile of the last 64 observations: conservative, because
// a reserve that is too small costs sandboxes.
//
// The zero value is ready to use and estimates zero until it observes
// something; NewEstimator gives it a prior. A nil *Estimator is an empty
// one that learns nothing: it observes nothing and estimates zero (Work's
// nil each), so a caller with no estimator to feed need not check. An
// Estimator is safe for concurrent use.
type Estimator struct {
	mu     sync.Mutex
	prior  time.Duration
	mean   float64 // EWMA in nanoseconds
	count  int
	recent [estimatorWindow]time.Duration
}

// ewmaWeight is the weight of a new observation in the mean.
const ewmaWeight = 0.2

// NewEstimator returns an Estimator that estimates prior until its first
// observation. A negative prior counts as zero, as a negative observation
// does (a duration is never negative): the Estimator is then the zero
// value, which estimates zero, so a Work reserve built on it reserves
// nothing until the first observation. Give a positive prior where the
// first pass needs a reserve.
func NewEstimator(prior time.Duration) *Estimator {
	return &Estimator{prior: max(prior, 0)}
}

// Observe records one measured duration. Negative durations count as zero.
// The first observation replaces the prior; each later one moves the mean by
// a fifth of its difference to it. On a nil Estimator Observe does nothing.
func (e *Estimator) Observe(d time.Duration) {
	if e == nil {
		return
	}
	d = max(d, 0)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.count == 0 {
		e.mean = float64(d)
	} else {
		e.mean += ewmaWeight * (float64(d) - e.mean)
	}
	e.recent[e.count%estimatorWindow] = d
	e.count++
}

// Count returns how many durations were observed; a nil Estimator
// returns zero.
func (e *Estimator) Count() int {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.count
}

// Mean returns the exponentially weighted mean, or the prior before any
// observation. A nil Estimator returns zero.
func (e *Estimator) Mean() time.Duration {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.meanLocked()
}

func (e *Estimator) meanLocked() time.Duration {
	if e.count == 0 {
		return e.prior
	}
	if e.mean >= math.MaxInt64 { // the largest Duration rounds up to 2^63, which converts to the most negative
		return math.MaxInt64
	}
	return time.Duration(e.mean)
}

// Quantile returns the q-quantile (nearest rank: the smallest observation
// with at least q of the window at or below it) of the last 64 observations,
// or the prior before any observation. q is clamped to [0, 1]; NaN counts as
// 0. A nil Estimator returns zero.
func (e *Estimator) Quantile(q float64) time.Duration {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.quantileLocked(q)
}

func (e *Estimator) quantileLocked(q float64) time.Duration {
	n := min(e.count, estimatorWindow)
	if n == 0 {
		return e.prior
	}
	if !(q > 0) { // also NaN
		q = 0
	}
	// Nearest rank is ceil(q*n); the small slack keeps float error in q*n
	// (0.14*50 = 7.000000000000001) from skipping a rank.
	i := min(max(int(math.Ceil(min(q, 1)*float64(n)-1e-9))-1, 0), n-1)
	if n-i <= topMax { // Estimate's 90th percentile of a full window is its 7th largest
		return topRank(e.recent[:n], n-i)
	}
	var s [estimatorWindow]time.Duration // on the stack: Estimate runs once a pass
	copy(s[:], e.recent[:n])
	return selectRank(s[:n], i)
}

// topMax is the largest k for which quantileLocked takes the k-th largest
// with topRank: beyond it, the insertions into topRank's list of the
// largest cost more than quickselect's partitions.
const topMax = 16

// topRank returns the k-th largest element of s (1 <= k <= min(topMax,
// len(s))), leaving s as it is. It looks at each element once, and most
// are passed over at one comparison with the smallest of the k largest
// seen so far, where selectRank copies the window and partitions it with
// branches a window that changed between two calls (a pass's preserves
// observed in between) keeps the predictor from learning. For the 7th
// largest of 64 it takes about two thirds of selectRank's time or less
// (BenchmarkQuantileOfFreshWindows), and a profile of a pause.Run of ten
// no-op sandboxes had put 7 % of the Run in selectRank.
//
// The first k elements fill the list, and the rest are compared with its
// smallest, held in low; the list is a slice of k, so that the indices of
// its insertions need no bound checks. One loop that asked each element
// whether the list was full yet, and read its smallest from the array
// behind a bound check, took about 2,060 instructions for the 7th largest
// of a Run of ten no-ops' window where these two take about 1,220
// (docs/preserve.md, "A Run's own cost, stop 57").
func topRank(s []time.Duration, k int) time.Duration {
	var buf [topMax]time.Duration
	top := buf[:k] // the k largest seen, in descending order
	for i, v := range s[:k] {
		placeDescending(top[:i+1], v)
	}
	low := top[k-1]
	for _, v := range s[k:] {
		if v > low {
			placeDescending(top, v)
			low = top[k-1]
		}
	}
	return low
}

// placeDescending puts v into top, which is in descending order but for
// its last element, in its place: the last element is dropped.
func placeDescending(top []time.Duration, v time.Duration) {
	j := len(top) - 1
	for ; j > 0 && top[j-1] < v; j-- {
		top[j] = top[j-1]
	}
	top[j] = v
}

// selectRank returns the element of rank k (from 0) of s, reordering s
// (Hoare's quickselect, the middle element as pivot): linear on average,
// where sorting the window costs a pass a few microseconds.
func selectRank(s []time.Duration, k int) time.Duration {
	lo, hi := 0, len(s)-1
	for lo < hi {
		pivot := s[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for s[i] < pivot {
				i++
			}
			for s[j] > pivot {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return s[k]
		}
	}
	return s[k]
}

// Estimate returns max(Mean, 90th percentile), or the prior before any
// observation. A nil Estimator estimates zero.
func (e *Estimator) Estimate() time.Duration {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return max(e.meanLocked(), e.quantileLocked(0.9)) // both the prior before any observation
}
