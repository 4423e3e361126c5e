package pause

import (
	"context"
	"sync/atomic"
	"time"
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
	tasks  []*task // in dispatch order
	word   atomic.Uint64
	closed atomic.Bool // no task starts any more
	done   chan struct{}
	// acquire is the context slot waits use: the phase's, cancelled early
	// when the queue closes.
	acquire     context.Context
	stopAcquire context.CancelFunc
}

const (
	openMask = 1<<32 - 1
	takeOne  = 1<<32 + 1 // next index +1, open count +1
)

func (r *run) newPass(tasks []*task) *pass {
	ps := &pass{r: r, tasks: tasks, done: make(chan struct{})}
	ps.word.Store(1) // the queue's own count
	ps.acquire, ps.stopAcquire = context.WithCancel(r.ctx)
	r.cur = ps
	return ps
}

func (ps *pass) settled() {
	if ps.word.Add(^uint64(0))&openMask == 0 {
		close(ps.done)
	}
}

// pop takes the next task to start at now, or returns nil when the queue
// is empty or the phase is over, closing the queue, or when the worker
// must end because the workers exceed a lowered limit.
func (ps *pass) pop(now time.Time) *task {
	r := ps.r
	if !r.adaptive {
		return ps.take(now)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return ps.popLocked(now)
}

// popLocked is pop when the limit adapts; the caller holds r.mu.
func (ps *pass) popLocked(now time.Time) *task {
	r := ps.r
	if r.workers > r.limit {
		return nil
	}
	t := ps.take(now)
	if t != nil {
		r.startedLocked(t, now)
	}
	return t
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
		if i >= len(ps.tasks) {
			ps.close()
			return nil
		}
		if !ps.word.CompareAndSwap(w, w+takeOne) {
			continue
		}
		if i == len(ps.tasks)-1 {
			ps.close()
		}
		return ps.tasks[i]
	}
}

// close closes the queue: tasks not taken by now never will be.
func (ps *pass) close() {
	if ps.closed.CompareAndSwap(false, true) {
		ps.stopAcquire()
		ps.settled()
	}
}

// dispatch starts a worker for every slot it acquires while the queue is
// open and, when the limit adapts, the workers are below the limit (else it
// gives the slot back and waits for room). A wait gives up at the phase
// deadline or when the queue closes. Acquire may succeed after the
// deadline passed, so the queue is checked again before a worker starts.
func (r *run) dispatch(ps *pass) {
	for {
		if ps.closed.Load() { // the last task is taken: no worker to start
			return
		}
		if err := r.sem.Acquire(ps.acquire, 1); err != nil {
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
			select {
			case <-r.room:
				continue
			case <-ps.acquire.Done():
				ps.close()
				return
			}
		}
		go r.worker(ps)
	}
}

// worker preserves tasks from the queue one after the other until it is
// empty, then gives its slot back. A worker whose task was abandoned has
// had its slot given away and ends when that Preserve returns.
func (r *run) worker(ps *pass) {
	// One clock reading per task: a task starts when the one before it on
	// this worker ended.
	now := time.Now()
	for t := ps.pop(now); t != nil; {
		var keep bool
		if now, t, keep = t.run(ps, now); !keep {
			return
		}
	}
	r.workerGone()
	r.sem.Release(1)
}

// await waits until the queue is closed and every started preserve of the
// pass is settled, or until returnSlack after the hard deadline: a Preserve
// that returns as soon as its context ends (at the hard deadline) is
// settled with its own error, not abandoned.
func (r *run) await(ps *pass) {
	until := r.hard
	if !until.IsZero() {
		until = until.Add(returnSlack)
	}
	receiveBy(ps.done, until)
}
