package pause

import (
	"math"
	"time"
)

// The adaptive limit: a throughput hill climb.
//
// A preserve is bound by something physical — the disk it writes the
// sandbox's memory to, the CPU a checkpoint burns, the remote store it
// waits on — and the best concurrency is where adding one more preserve
// stops adding throughput. The climber measures that throughput directly
// and moves the limit toward the knee.
//
// Measuring. Every preserve that succeeds at its first attempt is a sample:
// its units of work b (its size, when Sized, else its estimate, else one
// sandbox; see run.units), its duration d, and the average number of
// preserves running during it, k̄ (the integral of the in-flight count over
// its life, divided by d). By Little's law the node's throughput while it
// ran was k̄·b/d. An epoch at limit k collects the samples of preserves
// that started after the limit was set, and its throughput is
// Σ k̄·b / Σ d: the duration-weighted mean, so a few tiny preserves do
// not swing it.
//
// Moving. Starting at the initial limit, the climber doubles while a
// doubling pays (throughput grows by more than payFrac); when one does not,
// it bisects between the last level that paid and the one that did not;
// when the first doubling did not pay it halves instead, while halving
// costs less than payFrac, since fewer preserves at the same throughput
// finish each one sooner. It then holds, and every holdEpochs epochs
// probes a quarter more, keeping it only if it pays. It never leaves
// [1, ceiling].
//
// The deadline. A probe below the best level measured costs throughput.
// When the work left, at the best throughput measured, needs more than
// bindFrac of the time left, the climber stops exploring and pins the
// limit to the level measured fastest; only a climb still paying at the
// highest level measured may go on, since it can only help.
//
// Why not the published limiters as they are. Netflix's concurrency-limits
// (Vegas, Gradient2, AIMD) serve an open stream of requests and read
// latency: Vegas and Gradient compare the latency now with the smallest
// (or long-term) one, AIMD backs off on drops. A preserve's latency
// depends on its size (lognormal across sandboxes), so a no-load latency
// does not exist, and a longer preserve at a higher limit is not a bad
// sign when the node moves more bytes per second. And a drain is a batch
// with a deadline: what matters is bytes per second, now. So the climber
// takes Vegas's idea (compare what a limit delivers with what a smaller one
// did) and BBR's startup (double while the delivery rate grows), on the
// quantity the drain is judged by.
const (
	payFrac       = 0.05 // a doubling must add this much throughput to pay
	holdEpochs    = 8    // epochs held between two probes upward
	bindFrac      = 0.8  // the deadline binds when the work left needs this much of the time left
	minEpochWidth = 4    // samples an epoch needs at least
	sampleWeight  = 0.5  // weight of a new epoch's throughput at a level measured before
)

// The moves of the climber.
const (
	climbUp = iota
	climbDown
	climbNarrow
	climbHold
	climbPinned
)

// A climber is the adaptive limit's state. It is not safe for concurrent
// use: the run calls it under its mutex.
type climber struct {
	ceil  int
	k     int       // the limit now
	since time.Time // start of the epoch: earlier preserves are not its samples

	n          int     // samples this epoch
	work, took float64 // Σ k̄·b and Σ d of the epoch

	x      []float64 // x[k]: throughput measured at limit k, units per ns; 0 unmeasured
	move   int
	prev   int // the level measured before k (up and down moves)
	lo, hi int // narrow: lo paid, hi did not
	held   int
	start  int
}

func newClimber(start, ceil int, now time.Time) *climber {
	return &climber{ceil: ceil, k: start, start: start, since: now, x: make([]float64, ceil+1)}
}

// sample records a preserve that started at start, took d, moved b units
// at an average concurrency kbar, and returns the limit.
func (c *climber) sample(start time.Time, d time.Duration, b, kbar float64, now time.Time) int {
	if c.move == climbPinned || d <= 0 || start.Before(c.since) {
		return c.k
	}
	c.n++
	c.work += kbar * b
	c.took += float64(d)
	if c.n < max(minEpochWidth, c.k/4) {
		return c.k
	}
	got := c.work / c.took
	if old := c.x[c.k]; old > 0 {
		got = old + sampleWeight*(got-old)
	}
	c.x[c.k] = got
	c.set(c.next(), now)
	return c.k
}

// pays reports whether level b delivered enough more than level a < b to
// be worth its extra preserves.
func (c *climber) pays(a, b int) bool {
	return c.x[b] > c.x[a]*(1+payFrac*math.Log2(float64(b)/float64(a)))
}

// next decides the level after an epoch at c.k.
func (c *climber) next() int {
	k := c.k
	switch c.move {
	case climbUp:
		switch {
		case c.prev == 0 && k < c.ceil: // the first epoch
			return c.up(k, min(2*k, c.ceil))
		case c.prev == 0:
			return c.down(k)
		case c.pays(c.prev, k) && k < c.ceil:
			return c.up(k, min(2*k, c.ceil))
		case c.pays(c.prev, k):
			return c.hold(k)
		case c.prev == c.start && c.x[max(c.start/2, 1)] == 0 && c.start > 1:
			return c.down(c.prev) // the first doubling did not pay: try fewer
		default:
			return c.narrow(c.prev, k)
		}
	case climbDown:
		if c.pays(k, c.prev) { // halving cost too much
			return c.hold(c.prev)
		}
		if k > 1 {
			return c.down(k)
		}
		return c.hold(k)
	case climbNarrow:
		if c.pays(c.lo, k) {
			return c.narrow(k, c.hi)
		}
		return c.narrow(c.lo, k)
	case climbHold:
		if k > c.prev && c.prev > 0 { // a probe upward ended
			if c.pays(c.prev, k) {
				return c.up(k, min(2*k, c.ceil))
			}
			return c.hold(c.prev)
		}
		if c.held++; c.held >= holdEpochs && k < c.ceil {
			c.held = 0
			c.prev = k
			return min(k+max(1, k/4), c.ceil)
		}
	}
	return k
}

func (c *climber) up(from, to int) int {
	c.move, c.prev = climbUp, from
	return to
}

func (c *climber) down(from int) int {
	c.move, c.prev = climbDown, from
	return max(from/2, 1)
}

// narrow bisects between lo, which paid, and hi, which did not, until the
// two are within a quarter of each other.
func (c *climber) narrow(lo, hi int) int {
	c.lo, c.hi = lo, hi
	mid := (lo + hi) / 2
	if hi-lo <= max(1, lo/4) || mid == lo || c.x[mid] > 0 {
		return c.hold(lo)
	}
	c.move = climbNarrow
	return mid
}

func (c *climber) hold(k int) int {
	c.move, c.prev, c.held = climbHold, 0, 0
	return k
}

// set starts an epoch at level k.
func (c *climber) set(k int, now time.Time) {
	c.k = min(max(k, 1), c.ceil)
	c.since = now
	c.n, c.work, c.took = 0, 0, 0
}

// best returns the level measured fastest (the smallest of equals) and its
// throughput (units per ns), or (c.k, 0) before any measurement.
func (c *climber) best() (int, float64) {
	k, x := c.k, 0.0
	for i, v := range c.x {
		if v > x {
			k, x = i, v
		}
	}
	return k, x
}

// bind pins the limit to the level measured fastest, unless the climb is
// still paying at the highest level measured, and returns the limit.
func (c *climber) bind(now time.Time) int {
	if c.move == climbPinned {
		return c.k
	}
	k, x := c.best()
	if x == 0 {
		return c.k
	}
	if c.move == climbUp && c.prev > 0 && k == c.prev && c.k > c.prev {
		return c.k // probing one doubling above the best: it can only help
	}
	if k != c.k {
		c.set(k, now)
	}
	c.move = climbPinned
	return c.k
}
