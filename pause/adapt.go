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
// Noise. A shared disk or a busy neighbour scatters the samples, and two
// epochs of a few samples each can differ by more than any knee. Every
// level keeps the duration-weighted mean and variance of all its samples,
// so a level measured again is measured better, and a comparison counts
// only when the difference exceeds noiseZ standard errors of the two
// means. When it does not, the epoch goes on collecting samples, up to
// maxStretch times its width; only then does the climber decide on the
// means alone (the best guess, as before this rule).
//
// Moving. Starting at the initial limit, the climber doubles while a
// doubling pays (throughput grows by more than payFrac); when one does not,
// it bisects between the last level that paid and the one that did not;
// when the first doubling did not pay it halves instead, while halving
// costs less than payFrac, since fewer preserves at the same throughput
// finish each one sooner. It then holds, and every holdEpochs epochs
// probes a quarter more, keeping it only if it pays, or, every other time,
// a quarter fewer, keeping it unless the level held pays over it: a move
// made on an unlucky epoch is undone by the next probes instead of held
// for the rest of the Run. It never leaves [1, ceiling].
//
// Short passes. A climb learns only from completions, and a search below
// the level held costs about two rounds (the workers above the new limit
// drain, then the new level is measured). Two rules keep a pass of a few
// rounds from spending itself exploring. While the limit climbs, a pass
// ordered longest first takes its shortest preserves first, up to
// backShare of its work (pass.popLocked): longest first would give the
// first completion only after the longest preserves' time, most of a short
// pass at the starting limit (1.5 s of a 2 s disk Run on this project's
// VM). And a move below the level held, or a probe, is made only with
// shortRounds rounds of work queued at the higher of the two levels
// (about two go to draining the workers above the lower one and measuring
// it); without them a
// comparison that does not pay settles the limit on the better measured
// of its two levels: what the move found would come too late to be used.
//
// A start from what was learned. A Config.Limit with a MaxLimit is a
// level an earlier drain measured best on this node (target). The first
// Run does not start there: a device that got slower since would thrash at
// a high target for a whole round before a single completion could say so,
// and one that got faster would spend a round at a low one. It starts
// where the default climb starts, and its first epoch tests the target:
// below the knee each preserve runs at least as fast as at the knee, past
// it slower, and the Estimator a server starts from is the last drain's,
// measured at the knee. So a target above the start is jumped to when the
// epoch's preserves took no longer than their estimates, a target below it
// when they took longer; otherwise the node changed, and the climb goes on
// as it does by default. The first round is always the default one.
//
// The deadline. A probe below the best level measured costs throughput.
// When the work left, at the best throughput measured, needs more than
// bindFrac of the time left, the climber stops exploring and pins the
// limit to the level measured fastest; only a climb still paying at the
// highest level measured may go on, since it can only help, and so may
// the epoch at a learned level below the start, taken on the first
// epoch's evidence that the start is past the knee (fewer at once move as
// much there, and each preserve ends sooner). Nor does it pin a descent
// from a level whose next level up delivered less, beyond payFrac and the
// noise (falls): that device thrashes past its knee, the level held may be
// past it too, and fewer at once may move more; the descent goes on while
// halving does not cost, as with time to spare. Pinned there instead, a
// disk that thrashes past 2 writers kept 8 and preserved 64 where the knee
// preserves 120 (now 84); where the knee is the level held, the descent
// costs one epoch at half of it (4 % fewer on that disk with its knee at 8).
//
// What it follows. The climb is TCP's slow start (RFC 5681: double per
// round until the path stops delivering more) and BBR's startup exit
// (leave when the delivery rate stops growing, here by payFrac), then a
// hold with BBR-style gain cycling (a probe a quarter up, a quarter down).
// The comparison of two levels' delivered throughput is Vegas's idea, and
// the measured gradient between them decides a move, as in Netflix's
// concurrency-limits Gradient2. Those limiters as they are do not fit:
// Vegas and Gradient2 compare the latency now with a no-load (or
// long-term) latency, and AIMD backs off on drops; they serve an open
// stream of requests. A preserve's latency depends on its size (lognormal
// across sandboxes), so a no-load latency does not exist, and a longer
// preserve at a higher limit is not a bad sign when the node moves more
// bytes per second. A drain is a batch with a deadline, judged by bytes
// per second now: the climber measures that, and its exits (the deadline,
// a short pass) are the batch's, which an open stream does not have.
const (
	payFrac       = 0.05 // a doubling must add this much throughput to pay
	holdEpochs    = 8    // epochs held between two probes upward
	bindFrac      = 0.8  // the deadline binds when the work left needs this much of the time left
	shortRounds   = 4    // rounds of work queued that a move below, or a probe, needs (room)
	minEpochWidth = 4    // samples an epoch needs at least
	maxStretch    = 3    // an undecided epoch grows to this many times its width
	noiseZ        = 1.0  // standard errors a difference must exceed to count
)

// The moves of the climber.
const (
	climbUp = iota
	climbDown
	climbNarrow
	climbHold
	climbPinned
)

// A stat is the samples of a level or an epoch: their count and the
// duration-weighted sums of their throughputs (x = k̄·b/d, weight d).
type stat struct {
	n               int
	w, wx, wxx, wsq float64 // Σd, Σd·x, Σd·x², Σd²
}

func (s *stat) add(d, x float64) {
	s.n++
	s.w += d
	s.wx += d * x
	s.wxx += d * x * x
	s.wsq += d * d
}

func (s stat) plus(o stat) stat {
	return stat{s.n + o.n, s.w + o.w, s.wx + o.wx, s.wxx + o.wxx, s.wsq + o.wsq}
}

// mean is the throughput: Σ k̄·b / Σ d; 0 when unmeasured.
func (s stat) mean() float64 {
	if s.w == 0 {
		return 0
	}
	return s.wx / s.w
}

// se is the standard error of the mean: the weighted variance over the
// effective number of samples, (Σd)²/Σd².
func (s stat) se() float64 {
	if s.n < 2 || s.w == 0 {
		return math.Inf(1)
	}
	m := s.mean()
	v := max(s.wxx/s.w-m*m, 0)
	return math.Sqrt(v * s.wsq / (s.w * s.w))
}

// A climber is the adaptive limit's state. It is not safe for concurrent
// use: the run calls it under its mutex.
type climber struct {
	ceil  int
	k     int       // the limit now
	since time.Time // start of the epoch: earlier preserves are not its samples

	epoch     stat    // the samples of this epoch
	lv        []level // every level measured, in the order first measured
	lvBuf     [6]level
	undecided bool // a comparison of this epoch was within the noise
	stretch   bool // the epoch may still grow
	held1     bool // the climb stopped doubling once: no longer climbing
	queued    int  // the preserves queued (see sample)

	moves // where the climb is; next changes it
	start int

	// target is a learned level above start, jumped to after the first
	// epoch if its preserves kept to their estimates (paceD <= paceEst,
	// their durations and estimates summed); 0 once decided.
	target         int
	paceD, paceEst float64
}

// climbing reports whether the limit is still in its first climb: it has
// doubled at every epoch so far.
func (c *climber) climbing() bool { return c.move == climbUp && !c.held1 }

// moves is the part of the climber's state that next changes: decide
// restores it when next found the epoch undecided.
type moves struct {
	move   int
	prev   int // the level measured before k (up and down moves)
	lo, hi int // narrow: lo paid, hi did not
	held   int
	probes int // probes made while holding: they alternate up and down
	downTo int // the learned level below the start jumped to, until its epoch decides
}

// A level is the samples measured at limit k.
type level struct {
	k int
	s stat
}

func newClimber(start, ceil int, now time.Time) *climber {
	c := new(climber)
	c.init(start, ceil, now)
	return c
}

// init makes c, a zero climber, start at the limit start; a run holds its
// climber by value.
func (c *climber) init(start, ceil int, now time.Time) {
	c.ceil, c.k, c.start, c.since = ceil, start, start, now
	c.lv = c.lvBuf[:0] // a Run measures a few levels: no allocation on a worker
}

// at returns what level k measured, this epoch's samples included. Not
// inlined: pays calls it twice, and two copies of its frame in pays's
// would hold a worker's stack past its first 2 KiB (see decide).
//
//go:noinline
func (c *climber) at(k int) stat {
	s := c.level(k)
	if k == c.k {
		s.n += c.epoch.n
		s.w += c.epoch.w
		s.wx += c.epoch.wx
		s.wxx += c.epoch.wxx
		s.wsq += c.epoch.wsq
	}
	return s
}

// level returns the samples of the epochs decided at level k.
func (c *climber) level(k int) stat {
	for i := range c.lv { // by index: a copy of each level would be in the frame
		if c.lv[i].k == k {
			return c.lv[i].s
		}
	}
	return stat{}
}

// x returns the throughput measured at level k (units per ns), 0 when
// unmeasured.
func (c *climber) x(k int) float64 { return c.at(k).mean() }

// sample records a preserve that started at start, took d, moved b units
// at an average concurrency kbar, and was estimated to take est (0: no
// estimate), and returns the limit.
//
// queued is the number of preserves not started: a move to a level j
// below the one held, or a probe, is made only with shortRounds rounds of
// work queued (room); else the climber settles on the better
// measured of the two levels it compared: what the move found would come
// too late to be used.
func (c *climber) sample(start time.Time, d time.Duration, b, kbar, est float64, queued int, now time.Time) int {
	if c.move == climbPinned || d <= 0 || start.Before(c.since) {
		return c.k
	}
	c.queued = queued
	if c.target > 0 {
		c.paceD += float64(d)
		c.paceEst += est
	}
	c.epoch.add(float64(d), kbar*b/float64(d))
	if c.epoch.n >= max(minEpochWidth, c.k/4) {
		c.decide(now)
	}
	return c.k
}

// decide ends the epoch at now unless next finds it within the noise and
// it may still grow. It is apart from sample, and the epoch's end apart
// from it, so that the frames a worker's stack holds while next compares
// levels stay small: a worker's first 2 KiB of stack then hold a no-op
// preserve's settle, where growing them took a tenth of a Run of ten.
//
//go:noinline
func (c *climber) decide(now time.Time) {
	saved := c.moves
	c.undecided = false
	k := c.next(c.epoch.n < maxStretch*max(minEpochWidth, c.k/4))
	if c.undecided { // within the noise: measure on
		c.moves = saved
		return
	}
	c.endEpoch(k, now)
}

// endEpoch records the epoch's samples at its level and starts the next
// epoch at level k.
//
//go:noinline
func (c *climber) endEpoch(k int, now time.Time) {
	c.record(c.k, c.epoch)
	c.set(k, now)
}

// pays reports whether level b delivered enough more than level a < b to
// be worth its extra preserves. While the epoch may still grow, a
// difference within the noise is no answer: it marks the epoch undecided.
func (c *climber) pays(a, b int) bool {
	ma, sea := c.measured(a)
	mb, seb := c.measured(b)
	need := ma * (1 + payFrac*math.Log2(float64(b)/float64(a)))
	diff := mb - need
	if c.stretch && math.Abs(diff) <= noiseZ*math.Hypot(sea, seb) {
		c.undecided = true
	}
	return diff > 0
}

// measured returns the mean throughput at level k and its standard error,
// this epoch's samples included. pays calls it where two stats of its own
// would hold a worker's stack past its first 2 KiB (see decide).
//
//go:noinline
func (c *climber) measured(k int) (mean, se float64) {
	s := c.at(k)
	return s.mean(), s.se()
}

// room reports whether a move to level j has shortRounds rounds of work
// queued at the higher of j and the level held: a move down spends its
// first round at the level held (the workers above j finish their
// preserves), a probe up its rounds at j.
func (c *climber) room(j int) bool { return c.queued >= shortRounds*max(j, c.k, 1) }

// keep holds, when little work is left, the better measured of lo < hi:
// hi only if its throughput is higher. There is no time to measure on, and
// the means are the best guess; fewer preserves at the same throughput
// each finish sooner.
func (c *climber) keep(lo, hi int) int {
	if c.x(hi) > c.x(lo) {
		return c.hold(hi)
	}
	return c.hold(lo)
}

// next decides the level after an epoch at c.k; stretch says whether the
// epoch may still grow (see pays).
func (c *climber) next(stretch bool) int {
	c.stretch = stretch
	c.downTo = 0
	k := c.k
	switch c.move {
	case climbUp:
		switch {
		case c.target > k && c.paceD <= c.paceEst: // below the knee, as learned: up to it
			return c.up(k, min(c.target, c.ceil))
		case c.target > 0 && c.target < k && c.paceD > c.paceEst: // past the knee, as learned: down to it
			c.move, c.prev, c.downTo = climbDown, k, c.target
			return c.target
		case c.prev == 0 && k < c.ceil: // the first epoch
			return c.up(k, min(2*k, c.ceil))
		case c.prev == 0: // the first epoch, at the ceiling: try fewer
			if !c.room(k / 2) {
				return c.hold(k)
			}
			return c.down(k)
		case c.pays(c.prev, k) && k < c.ceil:
			return c.up(k, min(2*k, c.ceil))
		case c.pays(c.prev, k):
			return c.hold(k)
		case c.prev == c.start && c.x(max(c.start/2, 1)) == 0 && c.start > 1:
			if !c.room(c.prev / 2) {
				return c.keep(c.prev, k)
			}
			return c.down(c.prev) // the first doubling did not pay: try fewer
		case !c.room((c.prev + k) / 2):
			return c.keep(c.prev, k)
		default:
			return c.narrow(c.prev, k)
		}
	case climbDown:
		if c.pays(k, c.prev) { // halving cost too much
			return c.hold(c.prev)
		}
		if k > 1 && !c.room(k/2) {
			return c.keep(k, c.prev)
		}
		if k > 1 {
			return c.down(k)
		}
		return c.hold(k)
	case climbNarrow:
		if c.pays(c.lo, k) {
			return c.narrow(k, c.hi)
		}
		if !c.room((c.lo + k) / 2) {
			return c.keep(c.lo, k)
		}
		return c.narrow(c.lo, k)
	case climbHold:
		if k > c.prev && c.prev > 0 { // a probe upward ended
			if c.pays(c.prev, k) {
				return c.up(k, min(2*k, c.ceil))
			}
			return c.hold(c.prev)
		}
		if k < c.prev { // a probe downward ended
			if c.pays(k, c.prev) {
				return c.hold(c.prev)
			}
			return c.hold(k) // as fast with fewer: keep fewer
		}
		if c.held++; c.held < holdEpochs {
			return k
		}
		probe := min(k+max(1, k/4), c.ceil)
		if (c.probes+1)%2 == 0 && k > 1 || k == c.ceil {
			probe = k - max(1, k/4)
		}
		if !c.room(probe) {
			return k // too little work left to use what it finds
		}
		c.held, c.prev = 0, k
		c.probes++
		return probe
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
	if hi-lo <= max(1, lo/4) || mid == lo || c.x(mid) > 0 {
		return c.hold(lo)
	}
	c.move = climbNarrow
	return mid
}

func (c *climber) hold(k int) int {
	c.move, c.prev, c.held = climbHold, 0, 0
	return k
}

// record adds the samples s to level k.
func (c *climber) record(k int, s stat) {
	for i := range c.lv {
		if c.lv[i].k == k {
			c.lv[i].s = c.lv[i].s.plus(s)
			return
		}
	}
	c.lv = append(c.lv, level{k, s})
}

// set starts an epoch at level k.
func (c *climber) set(k int, now time.Time) {
	c.target = 0 // decided at the first epoch, whichever way
	c.k = min(max(k, 1), c.ceil)
	c.since = now
	c.epoch = stat{}
	c.held1 = c.held1 || c.move != climbUp
}

// best returns the level measured fastest in the epochs decided (the smallest of equals) and its
// throughput (units per ns), or (c.k, 0) before any measurement.
func (c *climber) best() (int, float64) {
	k, x := c.k, 0.0
	for _, l := range c.lv { // epochs decided, not the one under way
		if v := l.s.mean(); v > x || v == x && v > 0 && l.k < k {
			k, x = l.k, v
		}
	}
	return k, x
}

// falls reports whether the level measured next above j delivered less
// than j, by more than payFrac and beyond the noise (noiseZ standard
// errors): j's next level up is past the knee of a device that thrashes.
func (c *climber) falls(j int) bool {
	up := 0
	for _, l := range c.lv {
		if l.k > j && (up == 0 || l.k < up) {
			up = l.k
		}
	}
	if up == 0 {
		return false
	}
	sa, sb := c.at(j), c.at(up)
	if sa.n == 0 || sb.n == 0 {
		return false
	}
	diff := sa.mean()*(1-payFrac) - sb.mean()
	return diff > 0 && diff > noiseZ*math.Hypot(sa.se(), sb.se())
}

// learned returns, once epochs were decided at two levels at least (a
// comparison was made), the fewest preserves at once that delivered as
// much as the level measured fastest, by the rule a doubling must pass to
// pay (the fastest's throughput within payFrac of theirs): on a device
// that is flat past its knee the levels beyond it measure the same, and
// fewer at the same throughput finish each preserve sooner. Else 0.
func (c *climber) learned() int {
	if len(c.lv) < 2 {
		return 0
	}
	k, x := c.best()
	for _, l := range c.lv {
		if l.k < k && l.s.mean()*(1+payFrac) >= x {
			k = l.k
		}
	}
	return k
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
	if c.move == climbDown && c.downTo == c.k {
		// The learned level below the start, on the first epoch's evidence that the
		// start is past the knee: fewer at once move as much there, and each preserve
		// ends sooner. Measured before pinning, as a climb still paying is.
		return c.k
	}
	if c.move == climbDown && c.falls(c.prev) {
		// Halving a level whose next level up delivered less: the device
		// thrashes past its knee, so the level held may be past it too, and
		// fewer at once may move more. Pinned there, a thrashing disk with
		// its knee at 2 kept 8 at once and preserved 64 of the 120 the knee
		// preserves in the window (TestBindingDeadlineStillLeavesAThrashingLevel).
		// The descent stops where halving costs (next), as unbound.
		return c.k
	}
	if k != c.k {
		c.set(k, now)
	}
	c.move = climbPinned
	return c.k
}
