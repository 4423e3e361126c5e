package pause

import (
	"sync/atomic"
	"time"

	"github.com/drainkit/drainkit/internal/bounded"
)

// A pass is the queue of one listing pass and the count of its work still
// open. Workers hold one semaphore slot each for as long as they live and
// take tasks from the queue in order; the Run goroutine acquires a slot
// (a wait bounded by the phase deadline) for every worker it starts.
//
// Taking a task is lock-free. One atomic word holds both the index of the
// next task (high 32 bits) and the open count (low 32 bits): the tasks
// taken and not yet settled, plus one while the queue is open. Taking a
// task moves both at once, so the count cannot reach zero while a task is
// being taken, and once it is zero nothing can be taken any more.
type pass struct {
	r      *run
	tasks  taskList
	word   atomic.Uint64
	closed atomic.Bool // no task starts any more
	// claims counts the workers started that have not yet taken their
	// first task. The dispatcher starts no worker while one is claimed: the
	// worker started last may take every task left before the next one
	// would have started (short preserves: a goroutine start costs more
	// than a no-op preserve, and 10 sandboxes cost 10 starts), and when
	// preserves take longer than a goroutine's start, which is the case
	// worth a worker, the next one starts as soon as the last took its
	// task. So a pass never has more workers than tasks to give them.
	claims atomic.Int32
	// end is one past the last task not taken: tasks are taken from the
	// front, and, while the adaptive limit climbs (see popLocked), from
	// the back. It moves only under r.mu.
	end atomic.Int64
	// back says the pass may take from the back: its order is longest
	// first, with one priority. backUnits is the work taken from there,
	// at most backShare of units, the work of the whole pass.
	back             bool
	backUnits, units float64
}

// backShare is the most of a pass's work a climbing limit takes from the
// short end of a longest-first queue.
const backShare = 0.25

const (
	openMask = 1<<32 - 1
	takeOne  = 1<<32 + 1 // next index +1, open count +1
)

func (r *run) newPass(tasks taskList) *pass {
	ps := &pass{r: r, tasks: tasks}
	ps.word.Store(1) // the queue's own count
	ps.end.Store(int64(len(tasks.all)))
	r.cur = ps
	return ps
}

// settled counts a task settled, or the queue closed, and wakes await
// at the last.
func (ps *pass) settled() {
	if ps.word.Add(^uint64(0))&openMask == 0 {
		ps.r.poke()
	}
}

// over reports whether the queue is closed and every task taken is
// settled.
func (ps *pass) over() bool { return ps.word.Load()&openMask == 0 }

// pop takes the next task to start at now, or returns nil when the queue
// is empty or the phase is over, closing the queue, or when the worker
// must end because the workers exceed a lowered limit. When the limit
// adapts it also returns the in-flight integral at the start (see
// startedLocked), for the worker to keep until the task ends.
func (ps *pass) pop(now time.Time) (*task, float64) {
	r := ps.r
	if !r.adaptive {
		return ps.take(now), 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return ps.popLocked(now)
}

// untaken gives back what taking t, a task its worker then did not start
// (the Run's context ended as it came to, or the Run settled it
// NotStarted), counted (startedLocked: out of the queue, started, in
// flight from then), and takes the next task as pop does, in the same
// critical section. Kept in flight, t stayed there for the rest of the
// Run, and every preserve that ended after it was measured at one more at
// once than ran (docs/faults.md row 1280). It is in flight until now, as
// a task being started is; the Run's settle takes it out of the queue
// again with its outcome.
func (ps *pass) untaken(t *task, now time.Time) (*task, float64) {
	r := ps.r
	if !r.adaptive {
		return ps.take(now), 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unstartedLocked(r.units(ps.tasks.entry(t)), time.Now())
	return ps.popLocked(now)
}

// popLocked is pop when the limit adapts; the caller holds r.mu.
func (ps *pass) popLocked(now time.Time) (*task, float64) {
	r := ps.r
	if r.workers > r.limit {
		return nil, 0
	}
	var t *task
	back := ps.back && ps.backUnits < backShare*ps.units && r.climb.climbing()
	if back {
		t = ps.takeBack(now)
	} else {
		t = ps.take(now)
	}
	if t == nil {
		return nil, 0
	}
	u := r.units(ps.tasks.entry(t))
	if back {
		ps.backUnits += u
	}
	return t, r.startedLocked(u, now)
}

// take takes the next task, lock-free.
func (ps *pass) take(now time.Time) *task {
	r := ps.r
	for {
		if ps.closed.Load() {
			return nil
		}
		if r.phaseOverAt(now) {
			ps.close()
			return nil
		}
		w := ps.word.Load()
		i := int(w >> 32)
		if w&openMask == 0 {
			return nil
		}
		end := int(ps.end.Load())
		if i >= end {
			ps.close()
			return nil
		}
		if !ps.word.CompareAndSwap(w, w+takeOne) {
			continue
		}
		if i == end-1 {
			ps.close()
		}
		return ps.tasks.at(i)
	}
}

// takeBack takes the last task not taken, the shortest of a longest-first
// queue; the caller holds r.mu. A climbing limit learns from completions,
// and the longest preserves, started first, would give the first one only
// after most of a short pass is spent at the starting limit.
func (ps *pass) takeBack(now time.Time) *task {
	for {
		if ps.closed.Load() {
			return nil
		}
		if ps.r.phaseOverAt(now) {
			ps.close()
			return nil
		}
		w := ps.word.Load()
		i, end := int(w>>32), int(ps.end.Load())
		if w&openMask == 0 {
			return nil
		}
		if i >= end {
			ps.close()
			return nil
		}
		if !ps.word.CompareAndSwap(w, w+1) { // open count +1, index kept
			continue
		}
		ps.end.Store(int64(end - 1))
		if i == end-1 {
			ps.close()
		}
		return ps.tasks.at(end - 1)
	}
}

// close closes the queue: tasks not taken by now never will be. It wakes
// the dispatcher if it waits for room; one waiting for a slot wakes when a
// worker ends (no context to cancel on a worker's small stack).
func (ps *pass) close() {
	if ps.closed.CompareAndSwap(false, true) {
		ps.r.poke()
		ps.settled()
	}
}

// dispatch starts a worker for every slot it acquires while the queue is
// open, every worker started before has taken its first task and some
// task is left for a new one (see claims), and, when the limit adapts, the workers are below the limit (else it
// gives the slot back and waits for room). A wait gives up at the phase
// deadline; one for room also when the queue closes, one for a slot when
// a worker ends after it closed. Acquire may succeed after the deadline
// passed, so the queue is checked again before a worker starts.
func (r *run) dispatch(ps *pass) {
	for {
		if ps.closed.Load() { // the last task is taken: no worker to start
			return
		}
		if ps.claims.Load() > 0 || !ps.unclaimed() { // see claims
			if !r.waitRoom(ps) {
				return
			}
			continue
		}
		if err := r.sem.Acquire(r.ctx, 1); err != nil {
			ps.close()
			return
		}
		if ps.closed.Load() || r.phaseOver() {
			r.sem.Release(1)
			ps.close()
			return
		}
		if r.adaptive && !r.admitWorker() {
			r.sem.Release(1)
			if !r.waitRoom(ps) {
				return
			}
			continue
		}
		ps.claims.Add(1)
		go r.worker(ps)
	}
}

// unclaimed reports whether a task is left that no worker started and
// not yet running is coming for. Read without a lock, it may say yes once
// too often (a worker took a task between the two loads): that worker
// then finds the queue empty and ends.
func (ps *pass) unclaimed() bool {
	next := int(ps.word.Load() >> 32)
	return next+int(ps.claims.Load()) < int(ps.end.Load())
}

// waitRoom waits until a worker takes its first task or ends, the limit
// rises or the queue closes (poke), and reports false, closing the queue, when the phase deadline
// came first.
func (r *run) waitRoom(ps *pass) bool {
	select {
	case <-r.wake:
		r.woken()
		return true
	case <-r.ctx.Done():
		ps.close()
		return false
	}
}

// worker preserves tasks from the queue one after the other until it is
// empty, then gives its slot back. A worker whose task was abandoned has
// had its slot given away and ends when that Preserve returns.
func (r *run) worker(ps *pass) {
	// One clock reading per task: a task starts when the one before it on
	// this worker ended.
	now := time.Now()
	t, area0 := ps.pop(now)
	ps.claims.Add(-1)
	r.poke() // the dispatcher may start the next worker
	for t != nil {
		var keep bool
		if now, t, area0, keep = t.run(ps, now, area0); !keep {
			return
		}
	}
	r.workerGone()
	r.sem.Release(1)
}

// carryOn is worker's loop for the worker of ps whose Preserve ended its
// goroutine (task.exited): it runs t, taken at now with area0, and the
// tasks after it, then gives the slot back. Apart from worker, whose
// frames a call more under every Preserve made outgrow a goroutine's first
// 2 KiB (TestAWorkerPreservesNoOpsOnItsFirstStack).
func (r *run) carryOn(ps *pass, now time.Time, t *task, area0 float64) {
	for t != nil {
		var keep bool
		if now, t, area0, keep = t.run(ps, now, area0); !keep {
			return
		}
	}
	r.workerGone()
	r.sem.Release(1)
}

// await waits until the queue is closed and every started preserve of
// the pass is settled, or until returnSlack after the preserves'
// contexts ended at the hard deadline: a Preserve that returns as soon
// as its context ends is settled with its own error, not abandoned. The
// slack runs from when this goroutine, awake past the hard deadline, has
// seen the contexts end, not from the deadline: a process frozen across
// it (a container at its CPU quota, a loaded node's scheduler) runs
// again with the contexts' end and this wait's both due, the context
// package's timer (a goroutine of its own) not run yet, nor the
// goroutines it wakes, and a wait that gave up then named Preserves that
// return as their context ends as ones that ignored it (docs/faults.md
// row 2680). The slack itself is internal/bounded's: the time this
// goroutine saw pass on time, so that however many times the process is
// frozen inside it, Preserves that heed their context have it all
// (rows 2940, 3021). With the process running, the total is returnSlack.
// The hard deadline is read again when Tighten moves it, so that a
// Preserve ignoring its context holds the Run no longer than the
// deadline it was tightened to. One tightened to a time already past
// ended the contexts when it was read (Tighten's cut fires at once): the
// slack runs from then. A wake that moved neither (see run.wake) leaves
// the timer, and the slack, as they are.
func (r *run) await(ps *pass) {
	var w hardWait
	defer w.stop()
	for !ps.over() {
		if until := r.hardline(); !until.Equal(w.armed) {
			w.arm(until)
		}
		select {
		case <-r.wake:
			r.woken()
		case <-w.timerC:
			w.timerC, w.ended = nil, r.work.Done()
		case <-w.ended:
			w.ended, w.slack = nil, bounded.NewSlack(returnSlack)
		case <-w.slackC():
			if w.slack.Spent() {
				return
			}
		}
	}
}

// hardWait is await's wait: for the hard deadline it is armed for, then
// for the preserves' contexts to end, then for the slack.
type hardWait struct {
	timer  *time.Timer
	timerC <-chan time.Time
	armed  time.Time       // the hard deadline timer is armed for
	ended  <-chan struct{} // the contexts' end, once the hard deadline passed
	slack  *bounded.Slack  // once the contexts ended
}

// arm waits for hard from now on, and for nothing that came before it.
func (w *hardWait) arm(hard time.Time) {
	w.stop()
	w.timer = time.NewTimer(max(time.Until(hard), 0))
	w.timerC, w.armed, w.ended, w.slack = w.timer.C, hard, nil, nil
}

// slackC is the slack's channel, or nil before the slack runs.
func (w *hardWait) slackC() <-chan time.Time {
	if w.slack == nil {
		return nil
	}
	return w.slack.C()
}

func (w *hardWait) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.slack != nil {
		w.slack.Stop()
	}
}
