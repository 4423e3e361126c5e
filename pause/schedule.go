package pause

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// queueStats sums the work units of the tasks not started yet, so the
// adaptive limit's deadline check costs O(1) per start. It is kept only
// when the limit is adaptive: nothing else reads it.
type queueStats struct {
	n     int     // tasks queued
	units float64 // sum of their units
}

func (q *queueStats) add(units float64)    { q.n++; q.units += units }
func (q *queueStats) remove(units float64) { q.n--; q.units -= units }

// estimate returns the estimated preserve time of the sandbox whose entry
// is e: its own, else its size at the pass's time per byte, else the
// Estimator's.
func (r *run) estimate(e *Entry) time.Duration {
	if e.Estimate > 0 {
		return e.Estimate
	}
	if e.Size > 0 && r.perByte > 0 {
		return sizeTime(e.Size, r.perByte)
	}
	return r.unknown
}

// sizeTime is the time of a preserve of size bytes at perByte ns a byte,
// at most half the longest Duration, so that a few of them still add up.
// Converted as it was, a size past any time (cgroup v1's "no limit",
// 9223372036854771712, at 2 s a GiB) overflowed, and Go makes such a float
// the least int64 on amd64: a time below zero, then 1 ns, the shortest
// sandbox of its pass, which a binding deadline started first.
func sizeTime(size int64, perByte float64) time.Duration {
	return time.Duration(min(float64(size)*perByte, math.MaxInt64/2))
}

// sizeEstimates sets the time per byte of a pass: the measured one, else
// the prior that a sandbox of the pass's average size takes the
// Estimator's estimate. With neither, sizes still rank the sandboxes but
// say nothing of time (untimed). A Sized sandbox without an estimate of
// its own gets its size at that rate as its estimate.
func (r *run) sizeEstimates(tasks *taskList) {
	var bytes float64 // an int64 sum of two sizes of cgroup v1's "no limit" wraps below zero
	var sized int
	for i := range tasks.all {
		if e := tasks.entry(&tasks.all[i]); e.Estimate == 0 && e.Size > 0 {
			bytes += float64(e.Size)
			sized++
		}
	}
	r.perByte, r.untimed = 0, false
	if sized == 0 {
		return
	}
	var timed bool
	if r.perByte, timed = r.p.rate.get(); !timed && r.unknown > 0 {
		r.perByte, timed = float64(r.unknown)*float64(sized)/bytes, true
	}
	if !timed {
		r.perByte, r.untimed = 1, true // a rank, not a time
		return
	}
	for i := range tasks.all {
		if e := tasks.entry(&tasks.all[i]); e.Estimate == 0 && e.Size > 0 {
			e.Estimate = max(r.estimate(e), 1)
		}
	}
}

// order queues tasks and sorts them for dispatch: priority first, then by
// the Order, resolving OrderAuto from the estimates and the time left. It
// returns the order used and what it learned of the tasks.
func (r *run) order(tasks *taskList) (Order, passStats) {
	r.unknown = r.cfg.estimator.Estimate()
	r.sizeEstimates(tasks)
	st := r.scan(tasks)
	o := r.cfg.order
	auto := o == OrderAuto
	if auto {
		o = r.choose(st)
	}
	if o == OrderFIFO && st.samePriority {
		return o, st
	}
	if !st.samePriority || !st.sameEstimate { // else a stable sort keeps the order
		r.sortTasks(tasks, o)
	}
	if o == OrderShortestFirst && !auto && st.samePriority {
		r.pack(tasks) // only when asked for: it trusts the estimates' scale
	}
	return o, st
}

// passStats is what one loop over a pass's tasks tells the ordering and
// the adaptive limit: a large node's tasks are larger than a core's cache,
// and each loop over them costs a cache miss per task.
type passStats struct {
	work, longest time.Duration // the sum and the longest of the estimates
	samePriority  bool          // every task has the same priority
	sameEstimate  bool          // every task has the same estimate
	units         float64       // the work units of the tasks, when the limit adapts
}

// scan computes the passStats of tasks and, when the limit adapts, queues
// every task's work units.
func (r *run) scan(tasks *taskList) passStats {
	st := passStats{samePriority: true, sameEstimate: true}
	if len(tasks.all) == 0 {
		return st
	}
	first := tasks.entry(&tasks.all[0])
	p0, e0 := first.Priority, r.estimate(first)
	for i := range tasks.all {
		en := tasks.entry(&tasks.all[i])
		e := r.estimate(en)
		st.work += e
		st.longest = max(st.longest, e)
		st.sameEstimate = st.sameEstimate && e == e0
		st.samePriority = st.samePriority && en.Priority == p0
		if r.adaptive {
			u := r.units(en)
			r.queue.add(u)
			st.units += u
		}
	}
	return st
}

// sortTasks sorts tasks by priority, then by the Order o.
func (r *run) sortTasks(tasks *taskList, o Order) {
	all := tasks.all
	slices.SortStableFunc(tasks.ordered(), func(i, j int32) int {
		a, b := tasks.entry(&all[i]), tasks.entry(&all[j])
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		switch o {
		case OrderShortestFirst:
			return cmp.Compare(r.estimate(a), r.estimate(b))
		case OrderLongestFirst:
			return cmp.Compare(r.estimate(b), r.estimate(a))
		}
		return 0
	})
}

// pack refines shortest first when the deadline binds: of the tasks sorted
// shortest first, the longest prefix whose estimates fit in limit x time
// left is the set worth preserving; started longest first, those pack
// tightly into the slots (LPT), so the ones a slot cannot finish before the
// deadline are the few shortest, instead of one partial preserve per slot.
// The tasks that do not fit follow, shortest first.
//
// OrderAuto does not pack: packing needs the estimates to be right in
// scale, and realistic ones are not. With true times scattered around the
// estimates (lognormal, sigma 0.5: 13 % longer on average) the set it
// picks overflows the time left, and the deadline then takes the many
// short preserves queued at its end: 316 of an upper bound of 413
// preserved, and 179 with sizes as the only priors, against 388 for
// plain shortest first, which needs only the ranks
// (BenchmarkScheduleQualityNoisy). With exact estimates packing gains one
// sandbox in 400.
func (r *run) pack(tasks *taskList) {
	end := r.phaseEnd()
	if end.IsZero() || r.untimed {
		return
	}
	capacity := time.Until(end) * time.Duration(r.limit)
	var sum time.Duration
	k := 0
	for i := range tasks.all {
		if sum += r.estimate(tasks.entry(tasks.at(i))); sum > capacity {
			break
		}
		k++
	}
	if k > 1 {
		slices.Reverse(tasks.ordered()[:k])
	}
}

// choose resolves OrderAuto for a pass from its passStats. With no
// estimate at all it keeps the Lister's order; with sizes but no time per
// byte, shortest first when there is a deadline. When the current limit
// cannot preserve every sandbox before the phase deadline (an adaptive
// limit may rise, but nothing says the node's throughput will), shortest
// first preserves the most of them; otherwise longest first (LPT) ends the
// pass soonest, within 4/3 of the optimal makespan and usually within a
// few percent.
func (r *run) choose(st passStats) Order {
	end := r.phaseEnd()
	switch {
	case st.work == 0:
		return OrderFIFO
	case end.IsZero():
		return OrderLongestFirst
	case r.untimed: // sizes without a time: the safe guess is that it binds
		return OrderShortestFirst
	}
	makespan := max(st.longest, st.work/time.Duration(r.limit))
	if makespan > time.Until(end) {
		return OrderShortestFirst
	}
	return OrderLongestFirst
}
