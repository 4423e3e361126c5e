package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The states of a task. A task leaves stateRunning exactly once: to
// stateDone by its goroutine, or to stateAbandoned by the Run at the hard
// deadline; whoever wins decides the outcome.
const (
	stateQueued int32 = iota
	stateRunning
	stateDone
	stateAbandoned
)

// errAbandoned is the error of a sandbox whose Preserve had not returned by
// the hard deadline.
var errAbandoned = errors.New("pause: Preserve had not returned by the hard deadline; abandoned")

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
	span   trace.Span // nil unless the run is traced
	begin  time.Time

	state    atomic.Int32
	attempts atomic.Int32
	res      result // written by the goroutine before stateDone
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
	ctx := r.work
	if r.traced {
		ctx, t.span = r.p.tel.tracer.Start(ctx, "pause.Preserve",
			trace.WithAttributes(attribute.String("pause.sandbox", t.id)))
	}
	if r.cfg.timeout > 0 {
		ctx, t.cancel = context.WithTimeout(ctx, r.cfg.timeout)
	}
	t.ctx = ctx
	t.state.Store(stateRunning)
	r.p.tel.inflight.Add(r.ctx, 1)
	go t.run(ps)
}

func (t *task) run(ps *passState) {
	r := t.r
	defer ps.finishOne()
	defer r.sem.Release(1)
	res := t.preserve()
	if t.cancel != nil {
		t.cancel()
	}
	r.p.tel.inflight.Add(r.ctx, -1)
	t.res = res
	if !t.state.CompareAndSwap(stateRunning, stateDone) {
		return // abandoned: the Run has reported it and returned
	}
	if res.outcome == Preserved && r.cfg.estimator != nil {
		r.cfg.estimator.Observe(res.end.Sub(t.begin))
	}
	t.endSpan(&res)
	r.record(t, &res)
	t.log(&res)
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
