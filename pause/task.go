package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The states of a task. A worker moves it queued -> starting -> running,
// then running -> settling -> done when its Preserve returns or when its
// bound plus abandonAfter passes first (the sandbox is then abandoned). At
// the end of its pass the Run moves a task still queued or running to
// abandoned (NotStarted, or TimedOut at the hard deadline). Every move is a
// compare-and-swap, so exactly one of them decides the outcome; starting
// and settling are short, and the Run waits them out.
const (
	stateQueued int32 = iota
	stateStarting
	stateRunning
	stateSettling
	stateDone
	stateAbandoned
)

// abandonAfter is how long a Preserve may run past its sandbox bound
// (Config.SandboxTimeout) before it is abandoned: reported TimedOut, with
// its slot given to the next sandbox. A Preserve that ignores its context
// is broken; holding its slot would let a few of them starve every other
// sandbox on the node.
const abandonAfter = time.Second

// returnSlack is how long after the hard deadline Run still waits for
// preserves whose context ended at it: a Preserve that returns at once
// is reported with its own error (TimedOut), and only one that outlives
// its context by more is abandoned. It is well under the time drain
// gives a Preserver to return after its hard deadline.
const returnSlack = 20 * time.Millisecond

// errAbandoned is the error of a sandbox whose Preserve ignored its
// context past a deadline.
var errAbandoned = errors.New("pause: Preserve ignored its context past the deadline; abandoned")

// A task is one sandbox of a pass. A large node has one per sandbox
// listed, live for the whole Run, on top of its Report entry, so a task
// keeps only what it must: not the run it belongs to (the worker, the Run
// goroutine and the abandon timer pass it), nor its work units for the
// adaptive limit (run.units computes them again) or the in-flight
// integral at its start (its worker keeps it), so that a task is 40
// bytes.
type task struct {
	sb Sandbox
	e  *Entry // its Report entry: ID, Priority, Size and own Estimate set at admission

	// x is nil unless the task has a bound (Config.SandboxTimeout) or a
	// span: a task is allocated for every sandbox listed, and a large
	// node's are most of a Run's memory, so what most tasks would leave
	// zero lives apart.
	x *taskExtra

	attempts atomic.Int32
	state    atomic.Int32
}

// taskExtra is the part of a task that only a bound or a span needs.
type taskExtra struct {
	ctx    context.Context // Preserve's context
	cancel context.CancelFunc
	watch  *time.Timer // abandons the task at its bound plus abandonAfter
	span   trace.Span  // nil unless the run is traced
	r      *run        // for the abandon timer
}

// ctx returns the context of t's Preserve: the run's work context unless
// t has a bound or a span.
func (t *task) ctx(r *run) context.Context {
	if t.x != nil {
		return t.x.ctx
	}
	return r.work
}

// A result is how a task ended.
type result struct {
	outcome Outcome
	end     time.Time
	err     error
	stack   string
}

// newEntry fills e, a zero entry, with the account of a sandbox first
// listed in pass.
func newEntry(e *Entry, sb Sandbox, id string, pass int) {
	e.ID, e.Pass = id, pass
	if est, ok := sb.(Estimated); ok {
		e.Estimate = max(est.EstimatedPreserve(), 0)
	}
	if p, ok := sb.(Prioritized); ok {
		e.Priority = p.Priority()
	}
	if s, ok := sb.(Sized); ok {
		e.Size = max(s.Size(), 0)
	}
}

// start prepares the task's context, span and bound, and reports whether
// the task may run: not when the Run already settled it as NotStarted. It
// runs on the worker of r that took the task, at now.
func (t *task) start(r *run, now time.Time) bool {
	if !t.state.CompareAndSwap(stateQueued, stateStarting) {
		return false
	}
	t.e.Start = now
	if r.traced || r.cfg.timeout > 0 {
		t.startExtra(r)
	}
	r.p.tel.inflight.Add(r.ctx, 1)
	t.state.Store(stateRunning)
	return true
}

// startExtra gives t its span and its bound.
func (t *task) startExtra(r *run) {
	x := &taskExtra{ctx: r.work, r: r}
	if r.traced {
		x.ctx, x.span = r.p.tel.tracer.Start(x.ctx, "pause.Preserve",
			trace.WithAttributes(attribute.String("drainkit.pause.sandbox", t.e.ID)))
	}
	if r.cfg.timeout > 0 {
		x.ctx, x.cancel = context.WithTimeout(x.ctx, r.cfg.timeout)
	}
	t.x = x // before the timer: abandon reads it
	if r.cfg.timeout > 0 {
		x.watch = time.AfterFunc(r.cfg.timeout+abandonAfter, t.abandon)
	}
}

// run preserves the task on the calling worker of ps, started at now;
// area0 is what pop returned with it. It returns when the task ended, the
// worker's next task (nil when there is none: the worker then ends) with
// its area0, and whether the worker still holds its slot (false when the
// task was abandoned). The next task is taken as the task settles, in the
// same critical section when the limit adapts.
func (t *task) run(ps *pass, now time.Time, area0 float64) (time.Time, *task, float64, bool) {
	r := ps.r
	if !t.start(r, now) {
		next, area0 := ps.pop(now)
		ps.settled()
		return now, next, area0, true
	}
	res := t.preserve(r)
	if t.x != nil && t.x.watch != nil {
		t.x.watch.Stop()
	}
	ok, next, area0 := t.settle(r, res, ps, area0)
	return res.end, next, area0, ok
}

// abandon settles a task whose Preserve overran its bound by abandonAfter
// and gives its worker's slot to a new worker.
func (t *task) abandon() {
	r := t.x.r
	if ok, _, _ := t.settle(r, result{outcome: TimedOut, end: time.Now(), err: errAbandoned}, nil, 0); ok {
		r.workerGone()
		r.sem.Release(1)
	}
}

// settle moves a running task to done with res and accounts for it; area0
// is the in-flight integral when t started (0 when ps is nil). It reports
// whether it made the move and, when it did and ps is the pass of the
// worker that ran t, returns that worker's next task, with its area0.
func (t *task) settle(r *run, res result, ps *pass, area0 float64) (bool, *task, float64) {
	if !t.state.CompareAndSwap(stateRunning, stateSettling) {
		return false, nil, 0
	}
	t.e.fill(t, &res)
	t.state.Store(stateDone)
	if t.x != nil && t.x.cancel != nil {
		t.x.cancel()
	}
	if res.outcome == Preserved {
		took := res.end.Sub(t.e.Start)
		if r.cfg.estimator != nil {
			r.cfg.estimator.Observe(took)
		}
		r.p.rate.observe(t.e.Size, took)
	}
	var next *task // taken before t counts as settled, so the pass stays open
	var nextArea0 float64
	switch {
	case r.adaptive:
		r.mu.Lock()
		r.endedLocked(t, &res, area0)
		if ps != nil {
			next, nextArea0 = ps.popLocked(res.end)
		}
		r.mu.Unlock()
	case ps != nil:
		next = ps.take(res.end)
	}
	r.p.tel.inflight.Add(r.ctx, -1)
	t.endSpan(&res)
	r.record(t, &res)
	t.log(r, &res)
	r.cur.settled() // last: the pass may end, and Run return, right after
	return true, next, nextArea0
}

// final settles a task at the end of its pass: one never started is
// NotStarted, one still running (the hard deadline came) is abandoned as
// TimedOut. It returns the outcome it gave, and false if the task had
// already settled.
func (t *task) final(now time.Time) (res result, changed bool) {
	for {
		s := t.state.Load()
		switch s {
		case stateQueued:
			res = result{outcome: NotStarted, end: now}
		case stateRunning:
			res = result{outcome: TimedOut, end: now, err: errAbandoned}
		case stateStarting, stateSettling:
			runtime.Gosched() // a worker is midway; it takes no time
			continue
		default:
			return res, false
		}
		if t.state.CompareAndSwap(s, stateAbandoned) {
			t.e.fill(t, &res)
			return res, true
		}
	}
}

// preserve calls Preserve until it succeeds, fails permanently, or no retry
// fits before the task's deadline.
func (t *task) preserve(r *run) result {
	var bo backoff.BackOff
	ctx := t.ctx(r)
	for {
		t.attempts.Add(1)
		stack, err := t.call(ctx)
		switch {
		case err == nil:
			return result{outcome: Preserved, end: time.Now()}
		case stack != "":
			return result{outcome: Failed, end: time.Now(), err: err, stack: stack}
		case errors.Is(err, ErrGone):
			return result{outcome: Vanished, end: time.Now(), err: err}
		case ctx.Err() != nil:
			return result{outcome: TimedOut, end: time.Now(), err: err}
		case r.permanent(err):
			return result{outcome: Failed, end: time.Now(), err: err}
		}
		if bo == nil {
			bo = r.cfg.newBackOff()
			bo.Reset()
		}
		if !t.retryWait(r, ctx, bo.NextBackOff()) {
			return result{outcome: Failed, end: time.Now(), err: err}
		}
	}
}

// retryWait waits d before the next attempt on ctx, the task's context, and
// reports whether to make it.
// A retry is a new start of Preserve, so it keeps the rule every start
// keeps: none after the phase deadline, nor once Run's context ended
// (drain's Force). Its wait must therefore end by the phase deadline, as
// well as by the sandbox's own deadline (the hard deadline, or
// Config.SandboxTimeout); a timer that fires late, past the phase
// deadline, starts nothing either. Only an attempt already running may
// run on to the hard deadline: a retry that started after the phase
// deadline would take the reserves of the steps after the preserve phase.
func (t *task) retryWait(r *run, ctx context.Context, d time.Duration) bool {
	if d == backoff.Stop || r.phaseOver() {
		return false
	}
	end := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && end.After(dl) || !r.phase.IsZero() && end.After(r.phase) {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return !r.phaseOver()
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	return false
}

// call runs one attempt and turns a panic into an error and its stack.
func (t *task) call(ctx context.Context) (stack string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pause: Preserve of %s panicked: %v", t.e.ID, v)
			stack = string(debug.Stack())
		}
	}()
	return "", t.sb.Preserve(ctx)
}

// endSpan ends t's span, if it has one. The checks that usually return are
// apart from the work, so that a worker's frames stay small.
func (t *task) endSpan(res *result) {
	if t.x != nil && t.x.span != nil {
		t.endSpanSlow(res)
	}
}

func (t *task) endSpanSlow(res *result) {
	span := t.x.span
	span.SetAttributes(
		attribute.Int("drainkit.pause.attempts", int(t.attempts.Load())),
		attribute.String("drainkit.pause.outcome", string(res.outcome)),
	)
	if res.err != nil && res.outcome != Vanished {
		span.RecordError(res.err)
		span.SetStatus(codes.Error, res.err.Error())
	}
	span.End()
}

func (t *task) log(r *run, res *result) {
	l := r.cfg.log
	level := slog.LevelDebug
	if res.outcome == Failed || res.outcome == TimedOut {
		level = slog.LevelWarn
	}
	if l.Enabled(r.ctx, level) {
		t.logSlow(r, res, level)
	}
}

func (t *task) logSlow(r *run, res *result, level slog.Level) {
	l := r.cfg.log
	attrs := []slog.Attr{
		slog.String("sandbox", t.e.ID), slog.String("outcome", string(res.outcome)),
		slog.Int("attempts", int(t.attempts.Load())), slog.Duration("took", res.end.Sub(t.e.Start)),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	l.LogAttrs(r.ctx, level, "pause: sandbox "+string(res.outcome), attrs...)
}

// fill writes the account of t ending with res.
func (e *Entry) fill(t *task, res *result) {
	e.Outcome = res.outcome
	e.Attempts = int(t.attempts.Load())
	e.End = res.end
	if res.outcome != NotStarted { // Start was set when the task started
		e.Duration = res.end.Sub(e.Start)
	}
	if res.err != nil {
		e.Error = res.err.Error()
	}
	e.Stack = res.stack
}
