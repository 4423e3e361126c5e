package pause

import (
	"log/slog"
	"time"

	"github.com/drainkit/drainkit/internal/measured"
)

// The run's side of the adaptive limit. Workers and the dispatcher meet
// under r.mu: a worker takes a task only while the workers do not exceed
// the limit (one above it ends instead, so lowering the limit never cuts a
// preserve short), the dispatcher starts a worker only while they are
// below it, and every start and end updates the in-flight integral the
// climber's samples are made of. The semaphore still holds the ceiling.

// units returns the work units the climber measures throughput in of the
// task whose entry is e: its size (scaled to the first pass's time per
// byte), else its own estimate in nanoseconds, else the Estimator's
// estimate of the first pass (one millisecond when there is none). Within
// a Run the scale never changes, so throughputs measured at different
// times compare, and a task's units are the same whenever they are asked
// for: they are not kept in the task, of which a large node has one per
// sandbox. The first call, which fixes the scale, is the first pass's
// scan, on the Run goroutine before any worker starts.
func (r *run) units(e *Entry) float64 {
	if r.unitScale == 0 {
		r.unitScale = max(r.perByte, 1e-9)
		r.unitBytes = r.perByte > 0
		r.unitUnknown = float64(max(r.unknown, time.Millisecond))
	}
	switch {
	case e.Size > 0:
		return float64(e.Size) * r.unitScale
	case e.Estimate > 0:
		return float64(e.Estimate)
	}
	return r.unitUnknown
}

// tick advances the in-flight integral to now. The caller holds r.mu.
func (r *run) tick(now time.Time) {
	if d := now.Sub(r.areaAt); d > 0 { // one comparison of the clock readings, where After and Sub made two
		r.area += float64(r.inflight) * float64(d)
		r.areaAt = now
	}
}

// startedLocked accounts for a task of u work units (units) starting at
// now and returns the in-flight integral then, which the worker that runs
// it keeps for endedLocked (not the task: a large node has one per
// sandbox). The caller holds r.mu.
func (r *run) startedLocked(u float64, now time.Time) (area0 float64) {
	r.queue.remove(u)
	r.tick(now)
	r.startedUnits += u
	r.startedN++
	r.inflight++
	r.inflightUnits += u
	return r.area
}

// unstartedLocked undoes startedLocked for a task of u work units that
// its worker took and did not start, at now: it is queued again, as its
// state says, and no longer in flight. The caller holds r.mu.
func (r *run) unstartedLocked(u float64, now time.Time) {
	r.tick(now)
	r.queue.add(u)
	r.startedUnits -= u
	r.startedN--
	r.inflight--
	r.inflightUnits -= u
}

// endedLocked accounts for t, whose entry is e (written: Entry.end), ending with res, feeds
// the climber a sample when t was preserved at its first attempt (and is
// no preserve again), and
// applies the limit it returns; area0 is the in-flight integral when t started (startedLocked;
// unused unless t was preserved). It returns the move of the limit it
// made with a line to log (none: to is 0), which the caller writes once
// it let r.mu go (logLimit). The caller holds r.mu.
func (r *run) endedLocked(t *task, e *Entry, res *result, area0 float64) limitMove {
	u := r.units(e)
	r.tick(res.end)
	r.inflight--
	r.inflightUnits -= u
	d := e.Duration
	// A preserve again (e.Relisted) is no sample of the level: a round
	// trip when the listing lagged the pause, or what changed since a
	// resume; as it feeds no Estimator, it moves no limit. The rule is
	// internal/measured's, which the supervisor reads a Report's entries
	// by to tell whether the Run measured a level (and Limit reports it).
	if !measured.Sample(measured.Preserve{Preserved: res.outcome == Preserved, Attempts: int(t.attempts.Load()), Relisted: e.Relisted, Took: d}) {
		return limitMove{}
	}
	kbar := (r.area - area0) / float64(d)
	est := float64(e.Estimate) // its own, or its size at the rate known when its pass was ordered
	if est == 0 {
		est = r.unitUnknown // the Estimator's, fixed at the first pass: r.unknown is the Run goroutine's
	}
	if r.p.cold.Load() {
		r.p.cold.Store(false) // a preserve measured at the limit: Limit reports it
	}
	k := r.climb.sample(e.Start, d, u, kbar, est, r.queue.n, res.end)
	if r.bindsLocked(res.end) {
		k = r.climb.bind(res.end)
	}
	return r.setLimitLocked(k)
}

// bindsLocked reports whether the work left, at the best throughput
// measured, needs more than bindFrac of the time left before the phase
// deadline: then exploring would cost sandboxes. Half of the work in
// flight counts as left.
func (r *run) bindsLocked(now time.Time) bool {
	end := r.phaseEnd()
	if end.IsZero() {
		return false
	}
	_, x := r.climb.best()
	if x == 0 {
		return false
	}
	need := (r.queue.units + r.inflightUnits/2) / x
	return need > bindFrac*float64(end.Sub(now))
}

// setLimitLocked sets the limit to k and returns the move, when it made
// one with a line to log, for the caller to write once it let r.mu go
// (logLimit). The caller holds r.mu.
func (r *run) setLimitLocked(k int) limitMove {
	if k == r.limit {
		return limitMove{}
	}
	from := r.limit
	r.limit = k
	r.p.limit.Store(int64(k))
	if k > from {
		r.poke()
	}
	if !r.cfg.log.Enabled(r.ctx, slog.LevelInfo) {
		return limitMove{}
	}
	return limitMove{from: int32(from), to: int32(k)}
}

// limitMove is a change of the limit to be logged, from and to, written
// after r.mu is let go: the log handler is the user's code, which may
// block, panic or end its goroutine (runtime.Goexit). Written under r.mu,
// a handler that ended its goroutine there left r.mu locked, and every
// worker taking its next task, the dispatcher and the Run's end waited
// for it with no bound (docs/faults.md row 3820). Eight bytes: it is in
// the frame of every worker's settle (TestAWorkerPreservesNoOpsOnItsFirstStack).
type limitMove struct{ from, to int32 }

// logLimit logs m, a change of the limit (setLimitLocked); the caller
// does not hold r.mu. The best throughput and the sandboxes queued are
// read under r.mu, as the line is written, the line itself under none.
// Apart from the worker's settle, whose frame is on every worker's
// stack, so that the line's attributes are not.
//
//go:noinline
func (r *run) logLimit(m limitMove) {
	r.mu.Lock()
	best, queued := r.bestThroughput(), r.queue.n
	r.mu.Unlock()
	r.cfg.log.LogAttrs(r.ctx, slog.LevelInfo, "pause: concurrency changed",
		slog.Int("from", int(m.from)), slog.Int("to", int(m.to)), slog.Int("max_limit", r.cfg.maxLimit),
		best, slog.Int("queued", queued),
		slog.String("time_left", fmtLeft(r.phaseEnd())))
}

// bestThroughput is the best throughput measured, as a log attribute
// named with its unit: bytes per second when the Run's units are sizes
// (its first pass had Sized sandboxes), else sandboxes per second. The
// climber's units are neither (work per nanosecond, in units: a size at
// the first pass's time per byte, or an estimate), so it is turned back:
// by the time per byte, or by the mean units of the preserves started so
// far (exact when they all have the same estimate). The caller holds r.mu.
func (r *run) bestThroughput() slog.Attr {
	_, x := r.climb.best()
	perSecond := x * float64(time.Second)
	if r.unitBytes {
		return slog.Float64("best_throughput_bytes_per_s", perSecond/r.unitScale)
	}
	if r.startedN == 0 {
		return slog.Float64("best_throughput_sandboxes_per_s", 0)
	}
	return slog.Float64("best_throughput_sandboxes_per_s", perSecond*float64(r.startedN)/r.startedUnits)
}

// poke wakes the Run goroutine (see run.wake): the dispatcher waiting for
// room below the limit or for a worker to end, a pass waiting for its
// preserves, a listing waiting for its answer after a Tighten. What the
// caller wrote before it is seen by the Run goroutine once woken.
//
// A poke that finds a wake pending sends none: the Run goroutine, woken by
// that one, looks after both. Pending is a mark the poke sets and woken
// clears, each an atomic read-modify-write, so a poke that finds it set
// is ordered before the clear, and so before the Run goroutine's look.
// Where a send that failed on a full channel said so, it was not: a
// failed send is no synchronization under the Go memory model (the
// runtime reads the channel's count for it without a lock, a load arm64
// may perform before the poker's own update is seen), and the Run
// goroutine could take the wake, look before the update and wait again,
// with no wake to come (docs/faults.md row 3501).
func (r *run) poke() {
	if r.marks.Or(wakePending)&wakePending != 0 {
		return
	}
	select {
	case r.wake <- struct{}{}: // empty: the wake sent before was taken, then the mark cleared
	default: // never: no poke blocks a worker or Tighten
	}
}

// woken clears the pending wake (poke). The Run goroutine calls it as soon
// as it has taken a wake from run.wake, before it looks at what it waits
// for: a poke from then on sends a wake of its own.
func (r *run) woken() {
	r.marks.And(^wakePending)
}

// admitWorker reports whether the dispatcher may start one more worker,
// and counts it.
func (r *run) admitWorker() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers >= r.limit {
		return false
	}
	r.workers++
	return true
}

// workerGone accounts for a worker that ended or whose task was abandoned
// (its slot given back while its Preserve runs on), and wakes the
// dispatcher, which may wait for it (waitRoom).
func (r *run) workerGone() {
	if !r.adaptive {
		r.poke()
		return
	}
	r.mu.Lock()
	r.workers--
	below := r.workers < r.limit
	r.mu.Unlock()
	if below {
		r.poke()
	}
}
