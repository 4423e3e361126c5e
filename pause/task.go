package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The states of a task. A task leaves stateRunning exactly once, under its
// mutex: to stateDone when its Preserve returns or when its bound plus
// AbandonGrace passes first (the sandbox is then abandoned), or to
// stateAbandoned when the Run reaches the hard deadline first. Whoever makes
// the move decides the outcome.
const (
	stateQueued int32 = iota
	stateRunning
	stateDone
	stateAbandoned
)

// AbandonGrace is how long a Preserve may run past its sandbox bound
// (WithSandboxTimeout) before it is abandoned: reported TimedOut, with its
// slot given to the next sandbox. A Preserve that ignores its context is
// broken; holding its slot would let a few of them starve every other
// sandbox on the node.
const AbandonGrace = time.Second

// errAbandoned is the error of a sandbox whose Preserve ignored its
// context past a deadline.
var errAbandoned = errors.New("pause: Preserve ignored its context past the deadline; abandoned")

// A task is one sandbox of a pass.
type task struct {
	r     *run
	sb    Sandbox
	id    string
	entry int           // index in Report.Entries
	est   time.Duration // EstimatedPreserve, zero if unknown
	prio  int

	ctx    context.Context // Preserve's context
	cancel context.CancelFunc
	watch  *time.Timer // abandons the task at its bound plus AbandonGrace
	span   trace.Span  // nil unless the run is traced
	begin  time.Time
	ps     *passState

	attempts atomic.Int32
	mu       sync.Mutex
	state    int32
	res      result
}

// A result is how a task ended.
type result struct {
	outcome Outcome
	end     time.Time
	err     error
	stack   string
}

func (t *task) init(r *run, sb Sandbox, id string, entry int) {
	t.r, t.sb, t.id, t.entry = r, sb, id, entry
	if e, ok := sb.(Estimated); ok {
		t.est = max(e.EstimatedPreserve(), 0)
	}
	if p, ok := sb.(Prioritized); ok {
		t.prio = p.Priority()
	}
}

// start launches the task's goroutine. The caller holds a slot for it.
func (t *task) start(ps *passState) {
	r := t.r
	t.begin = time.Now()
	t.ps = ps
	ctx := r.work
	if r.traced {
		ctx, t.span = r.p.tel.tracer.Start(ctx, "pause.Preserve",
			trace.WithAttributes(attribute.String("pause.sandbox", t.id)))
	}
	if r.cfg.timeout > 0 {
		ctx, t.cancel = context.WithTimeout(ctx, r.cfg.timeout)
		t.watch = time.AfterFunc(r.cfg.timeout+AbandonGrace, t.abandon)
	}
	t.ctx = ctx
	t.mu.Lock()
	t.state = stateRunning
	t.mu.Unlock()
	r.p.tel.inflight.Add(r.ctx, 1)
	go t.run()
}

func (t *task) run() {
	res := t.preserve()
	if t.watch != nil {
		t.watch.Stop()
	}
	if t.settle(res) && res.outcome == Preserved && t.r.cfg.estimator != nil {
		t.r.cfg.estimator.Observe(res.end.Sub(t.begin))
	}
}

// abandon settles a task whose Preserve overran its bound by AbandonGrace.
func (t *task) abandon() {
	t.settle(result{outcome: TimedOut, end: time.Now(), err: errAbandoned})
}

// settle moves a running task to stateDone with res, then accounts for it
// and frees its slot. It reports whether it made the move.
func (t *task) settle(res result) bool {
	t.mu.Lock()
	if t.state != stateRunning {
		t.mu.Unlock()
		return false
	}
	t.state, t.res = stateDone, res
	t.mu.Unlock()
	r := t.r
	if t.cancel != nil {
		t.cancel()
	}
	r.p.tel.inflight.Add(r.ctx, -1)
	t.endSpan(&res)
	r.record(t, &res)
	t.log(&res)
	r.sem.Release(1)
	t.ps.finishOne()
	return true
}

// final returns the task's outcome for the Report; at the hard deadline
// (hard true) a task still running is abandoned, one not started is
// NotStarted.
func (t *task) final(now time.Time) (res result, changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.state {
	case stateQueued:
		t.state, t.res = stateAbandoned, result{outcome: NotStarted, end: now}
		return t.res, true
	case stateRunning:
		t.state, t.res = stateAbandoned, result{outcome: TimedOut, end: now, err: errAbandoned}
		return t.res, true
	}
	return t.res, false
}

// preserve calls Preserve until it succeeds, fails permanently, or no retry
// fits before the task's deadline.
func (t *task) preserve() result {
	var bo backoff.BackOff
	for {
		t.attempts.Add(1)
		stack, err := t.call()
		switch {
		case err == nil:
			return result{outcome: Preserved, end: time.Now()}
		case stack != "":
			return result{outcome: Failed, end: time.Now(), err: err, stack: stack}
		case errors.Is(err, ErrGone):
			return result{outcome: Vanished, end: time.Now(), err: err}
		case t.ctx.Err() != nil:
			return result{outcome: TimedOut, end: time.Now(), err: err}
		case t.permanent(err):
			return result{outcome: Failed, end: time.Now(), err: err}
		}
		if bo == nil {
			bo = t.r.cfg.newBackOff()
			bo.Reset()
		}
		if !t.wait(bo.NextBackOff()) {
			return result{outcome: Failed, end: time.Now(), err: err}
		}
	}
}

// call runs one attempt and turns a panic into an error and its stack.
func (t *task) call() (stack string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pause: Preserve of %s panicked: %v", t.id, v)
			stack = string(debug.Stack())
		}
	}()
	return "", t.sb.Preserve(t.ctx)
}

func (t *task) permanent(err error) bool {
	var pe *backoff.PermanentError
	return errors.As(err, &pe) || t.r.cfg.isPermanent(err)
}

// wait sleeps d before a retry and reports whether to retry: not when the
// policy says Stop, when the wait would end past the task's deadline, or
// when the context ends during the wait. backoff v4 itself would neither
// shorten a wait nor skip one whose context is over, hence this.
func (t *task) wait(d time.Duration) bool {
	if d == backoff.Stop || t.ctx.Err() != nil {
		return false
	}
	if dl, ok := t.ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
		return false
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.ctx.Done():
		return false
	}
}

func (t *task) endSpan(res *result) {
	if t.span == nil {
		return
	}
	t.span.SetAttributes(
		attribute.Int("pause.attempts", int(t.attempts.Load())),
		attribute.String("pause.outcome", string(res.outcome)),
	)
	if res.err != nil && res.outcome != Vanished {
		t.span.RecordError(res.err)
		t.span.SetStatus(codes.Error, res.err.Error())
	}
	t.span.End()
}

func (t *task) log(res *result) {
	l := t.r.cfg.log
	level := slog.LevelDebug
	if res.outcome == Failed || res.outcome == TimedOut {
		level = slog.LevelWarn
	}
	if !l.Enabled(t.r.ctx, level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("sandbox", t.id), slog.String("outcome", string(res.outcome)),
		slog.Int("attempts", int(t.attempts.Load())), slog.Duration("took", res.end.Sub(t.begin)),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	l.LogAttrs(t.r.ctx, level, "pause: sandbox "+string(res.outcome), attrs...)
}

// fill writes the account of t ending with res.
func (e *Entry) fill(t *task, res *result) {
	e.Outcome = res.outcome
	e.Attempts = int(t.attempts.Load())
	e.End = res.end
	if res.outcome != NotStarted {
		e.Start = t.begin
		e.Duration = res.end.Sub(t.begin)
	}
	if res.err != nil {
		e.Error = res.err.Error()
	}
	e.Stack = res.stack
}
