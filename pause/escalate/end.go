package escalate

import (
	"context"
	"sync"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/follow"
)

// An end is when one of Stop's waits ends. The kill wait's is fixed. The wait after
// the signal's follows its context's Deadline as it moves earlier: a drain's budget that
// moves SIGKILL earlier (a deletion with a shorter grace, read during the wait) moves the
// Deadline its steps' and Preserves' contexts report (internal/follow's Context,
// pause.Preserver.Tighten) and cancels them there, at the new deadline. Laid out once,
// from the deadline Stop began with, the wait ran on to that cancel: SIGKILL went out as
// the context ended, with no time left to see it work, and a target that ignored the
// signal and was killed ended ExitUnknown (row 1040). The end is laid out again each time
// the wait reads the Deadline: when the wait fails and is retried, and, while it blocks,
// when the Deadline moves (follow.Changed: the Deadline of a Preserver's and a drain
// step's context says so), or, for a context whose Deadline says nothing of its moves,
// every recheck.
type end struct {
	mu sync.Mutex
	at time.Time
	// Following a context's Deadline; ctx is nil for a fixed end.
	ctx   context.Context
	lay   func(dl time.Time) time.Time // the end for a deadline dl
	dl    time.Time                    // ctx's deadline as last read
	hasDl bool
	every time.Duration // how often a wait that blocks reads ctx's Deadline again, if no channel says it moved
}

// fixedEnd is an end at at.
func fixedEnd(at time.Time) *end { return &end{at: at} }

// recheckEvery is how often a wait after the signal reads its context's Deadline again
// while it blocks, when the context does not say when its Deadline moves (one drainkit
// did not make: follow.Changed): a tenth of killWait, within [10 ms, 1 s]. A move is
// followed at most that late, so a deadline moved to where SIGKILL is already due leaves
// the kill wait at least nine tenths of KillWait. A Preserver's and a drain step's
// context say when it moves: their waits read it then, and SIGKILL goes out at the move
// (row 1151: 0.3 s after it, at the next recheck, before).
func recheckEvery(killWait time.Duration) time.Duration {
	return min(max(killWait/10, 10*time.Millisecond), time.Second)
}

// termEnd is the end of the wait after the signal, begun now: TermWait after now (by
// default the rest of ctx's window, or defaultTermWait without a deadline), but never
// into the killWait the SIGKILL and its wait need before ctx's deadline, laid out by the
// plan's rule (deadline.Split). Both waits reserve killWait, so a window shorter than
// twice that is shared equally: a target that would save itself on the signal still gets
// its chance. A deadline that moves earlier while the wait runs lays it out again, from
// the same start, as if ctx had had that deadline from the beginning: the end only moves
// earlier, and is never later than TermWait after the start.
func (e Policy) termEnd(ctx context.Context, killWait time.Duration) *end {
	start := time.Now()
	w := &end{ctx: ctx, every: recheckEvery(killWait), lay: func(dl time.Time) time.Time {
		ws := deadline.Split(start, dl,
			deadline.Phase{Name: "term", Reserve: deadline.Fixed(killWait), Critical: true, Max: max(e.TermWait, 0)},
			deadline.Phase{Name: "kill", Reserve: deadline.Fixed(killWait), Critical: true})
		return ws[0].Deadline
	}}
	if w.dl, w.hasDl = ctx.Deadline(); w.hasDl {
		w.at = w.lay(w.dl)
		return w
	}
	wait := e.TermWait
	if wait <= 0 {
		wait = defaultTermWait
	}
	w.at = start.Add(wait)
	return w
}

// when returns the end, laid out again first if ctx's Deadline moved earlier since it
// was last read (or ctx has one now and had none).
func (w *end) when() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		return w.at
	}
	if dl, ok := w.ctx.Deadline(); ok && (!w.hasDl || dl.Before(w.dl)) {
		w.dl, w.hasDl = dl, true
		if at := w.lay(dl); at.Before(w.at) {
			w.at = at
		}
	}
	return w.at
}

// cut ends the wait at at, if it would end later.
func (w *end) cut(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.Before(w.at) {
		w.at = at
	}
}

// context returns parent ended at until(), an end derived from w's (the wait's, or a
// send's bounded by it). For a fixed end that is a deadline. Otherwise it is the
// deadline until() gave now, and a goroutine reads until() again whenever w.ctx's
// Deadline moves (follow.Changed), or every w.every for a context that does not say,
// and cancels the context once the end it gives has come, if that is earlier: the wait
// then ends at a deadline that moved while it blocked, at once (at most w.every late
// without the channel). cancel stops that goroutine and waits for it.
func (w *end) context(parent context.Context, until func() time.Time) (context.Context, context.CancelFunc) {
	first := until()
	ctx, cancelDl := context.WithDeadline(parent, first)
	if w.ctx == nil {
		return ctx, cancelDl
	}
	ctx, cancelMoved := context.WithCancel(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var timer *time.Timer
		defer func() {
			if timer != nil {
				timer.Stop()
			}
		}()
		for {
			moved, says := follow.Changed(w.ctx) // before until(): a move between the two is not missed
			at := until()
			left := time.Until(at)
			if left <= 0 {
				if at.Before(first) { // moved: no deadline ends it there
					cancelMoved()
				}
				return // else its own deadline ends it
			}
			if !says {
				left = min(left, w.every)
			}
			if timer == nil {
				timer = time.NewTimer(left)
			} else {
				timer.Reset(left)
			}
			select {
			case <-timer.C:
			case <-moved:
			case <-ctx.Done():
				return
			case <-stop:
				return
			}
		}
	})
	return ctx, func() {
		close(stop)
		wg.Wait()
		cancelMoved()
		cancelDl()
	}
}
