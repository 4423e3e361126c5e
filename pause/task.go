package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/internal/follow"
	"github.com/drainkit/drainkit/internal/usererr"
)

// The states of a task. A worker moves it queued -> starting -> entering
// -> running, then running -> settling -> done when its Preserve returns
// or when its bound plus abandonAfter passes first (the sandbox is then
// abandoned). At the end of its pass the Run moves a task still queued or
// starting to abandoned as NotStarted, and one running as TimedOut (at the
// hard deadline). Every move is a compare-and-swap, so exactly one of them
// decides the outcome; entering and settling are short (the worker owns
// the task's entry there), and the Run waits them out, but starting calls
// the TracerProvider, which the Run does not wait for.
const (
	stateQueued int32 = iota
	stateStarting
	stateEntering
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
// its context by more is abandoned. It runs from when the Run has seen
// the contexts end (await), not from the deadline, and counts the time
// the Run saw pass on time (internal/bounded's Slack), not wall time. It
// is well under the time drain gives a Preserver to return after its hard
// deadline.
const returnSlack = 20 * time.Millisecond

// errAbandoned is the error of a sandbox whose Preserve ignored its
// context past a deadline.
var errAbandoned = errors.New("pause: Preserve ignored its context past the deadline; abandoned")

// A task is one sandbox of a pass. A large node has one per sandbox
// listed, live for the whole Run, on top of its Report entry, so a task
// keeps only what it must, and no pointer: its Report entry, its sandbox
// and what only a bound or a span needs (taskExtra) are found by index in
// its pass's taskList, the run is passed by the worker, the Run goroutine
// and the abandon timer, the work units of the adaptive limit are
// computed again when asked for (run.units), and the in-flight integral
// at its start is kept by its worker. A task is 16 bytes, and the
// collector never scans a pass's tasks.
type task struct {
	ei int32 // its Report entry: ID, Priority, Size and own Estimate set at admission
	k  int32 // its index in its taskList: its sandbox, its extra part

	attempts atomic.Int32
	state    atomic.Int32
}

// taskExtra is the part of a task that only a bound or a span needs.
type taskExtra struct {
	ctx    context.Context // Preserve's context
	bound  follow.Context  // with a bound, the bound's context, whose Deadline follows Tighten: ctx is &bound
	cancel context.CancelFunc
	watch  *time.Timer // abandons the task at its bound plus abandonAfter
	span   trace.Span  // nil unless the run is traced
}

// ctx returns the context of t's Preserve: the run's work context unless
// t has a bound or a span.
func (t *task) ctx(ps *pass) context.Context {
	if x := ps.tasks.extra(t); x != nil {
		return x.ctx
	}
	return ps.r.work
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

// start prepares the task's context, span and bound, and returns its
// sandbox and whether the task may run: not when the Run already settled
// it as NotStarted, nor once Run's context ended. It runs on the worker of
// ps that took the task, at now. again says the task is a preserve again
// of a sandbox preserved (Relisted): one that says it is preserved
// already (ErrGone: a listing that lagged the pause) leaves the first
// preserve standing.
func (t *task) start(ps *pass, now time.Time) (_ Sandbox, again, ok bool) {
	// The worker took t at now, as the task before settled, and has
	// recorded and logged that one since: a slow log sink or span
	// exporter may have held it past the phase deadline. An atomic load,
	// not a clock reading; the Run settles t NotStarted.
	if ps.r.ctx.Err() != nil {
		return nil, false, false
	}
	if !t.state.CompareAndSwap(stateQueued, stateStarting) {
		return nil, false, false
	}
	r := ps.r
	var x *taskExtra // what only a bound or a span needs
	if r.traced || r.cfg.timeout > 0 {
		x = &taskExtra{ctx: r.work}
	}
	if r.traced {
		// The span's start is the TracerProvider's, which may block (an
		// exporter that starts spans synchronously): the Run does not wait
		// for it at the hard deadline, but settles t NotStarted (final).
		// Its Preserve is then not called at all, and only its span was
		// begun (and the preserve counted active): its bound and its
		// abandon timer come after the claim below.
		x.ctx, x.span = r.p.tel.tracer.Start(x.ctx, "pause.Preserve",
			trace.WithAttributes(attribute.String("drainkit.pause.sandbox", ps.tasks.entry(t).ID)))
	}
	r.p.tel.inflight.Add(r.ctx, 1) // the MeterProvider's: before the claim, as the span
	if !t.state.CompareAndSwap(stateStarting, stateEntering) {
		endSpan(x, t, &result{outcome: NotStarted})
		r.p.tel.inflight.Add(r.ctx, -1)
		return nil, false, false
	}
	// Entering, t's entry is the worker's: the Run, which may settle t
	// once it runs (final), waits. Read here, not once t runs: an
	// abandonment writes the entry over, and a Preserve abandoned that
	// returns before the Report (keepLate) is judged as one on time.
	e := ps.tasks.entry(t)
	e.Start = now
	again = e.Relisted > 0 && e.Outcome == Preserved
	if x != nil {
		t.bind(ps, x) // the standard library's alone: it takes no time
	}
	t.state.Store(stateRunning)
	return ps.tasks.sandbox(t), again, true
}

// bind gives t, whose extra part is x, its bound, if the run has one, and
// x as its extra part.
func (t *task) bind(ps *pass, x *taskExtra) {
	r := ps.r
	if r.cfg.timeout > 0 {
		// Its deadline, the earlier of the bound and the hard deadline,
		// is fixed here; a Tighten after must still move it.
		var bound context.Context
		bound, x.cancel = context.WithTimeout(x.ctx, r.cfg.timeout)
		x.bound = r.tight.Context(bound)
		x.ctx = &x.bound
	}
	ps.tasks.x[t.k] = x // before the timer: abandon reads it
	if r.cfg.timeout > 0 {
		x.watch = time.AfterFunc(r.cfg.timeout+abandonAfter, func() { t.abandon(ps) })
	}
}

// run preserves the task on the calling worker of ps, started at now;
// area0 is what pop returned with it. It returns when the task ended, the
// worker's next task (nil when there is none: the worker then ends) with
// its area0, and whether the worker still holds its slot (false when the
// task was abandoned). The next task is taken as the task settles, in the
// same critical section when the limit adapts.
func (t *task) run(ps *pass, now time.Time, area0 float64) (time.Time, *task, float64, bool) {
	sb, again, ok := t.start(ps, now)
	if !ok {
		next, area0 := ps.untaken(t, now)
		ps.settled()
		return now, next, area0, true
	}
	var res result
	t.preserve(ps, sb, &res) // into res: a result returned is copied, and the frame held it twice
	if x := ps.tasks.extra(t); x != nil && x.watch != nil {
		x.watch.Stop()
	}
	if again && res.outcome == Vanished {
		res.outcome, res.err = Preserved, nil // "already preserved": the first preserve stands
	}
	ok, next, area0 := t.settle(ps, &res, true, area0)
	if !ok { // abandoned while it ran: its account may still be the Report's
		t.returnedLate(ps, &res)
	}
	return res.end, next, area0, ok
}

// returnedLate gives res, how the Preserve of t, a task of ps abandoned
// while it ran, ended, to the Report if Run has not made it yet, and says
// so in a line if it has. Apart from run: the worker's frames stay small.
//
//go:noinline
func (t *task) returnedLate(ps *pass, res *result) {
	if !ps.r.keepLate(t, res) {
		ps.r.afterReport(ps.tasks.sandbox(t), res)
	}
}

// abandon settles a task of ps whose Preserve overran its bound by
// abandonAfter and gives its worker's slot to a new worker.
func (t *task) abandon(ps *pass) {
	r := ps.r
	if ok, _, _ := t.settle(ps, &result{outcome: TimedOut, end: time.Now(), err: errAbandoned}, false, 0); ok {
		r.workerGone()
		r.sem.Release(1)
	}
}

// settle moves a running task of ps to done with *res and accounts for
// it (res by pointer: a result is 72 bytes the worker's frame would hold
// twice); area0 is the in-flight integral when t started (0 when not worker).
// It reports whether it made the move and, when it did and the caller is
// the worker that ran t (worker), returns that worker's next task, with
// its area0.
func (t *task) settle(ps *pass, res *result, worker bool, area0 float64) (bool, *task, float64) {
	if !t.state.CompareAndSwap(stateRunning, stateSettling) {
		return false, nil, 0
	}
	r := ps.r
	e := ps.tasks.entry(t)
	e.fill(t, res)
	t.state.Store(stateDone)
	x := ps.tasks.extra(t)
	if x != nil && x.cancel != nil {
		x.cancel()
	}
	r.observe(e, res)
	var next *task // taken before t counts as settled, so the pass stays open
	var nextArea0 float64
	var moved limitMove // of the limit, with a line to write
	switch {
	case r.adaptive:
		r.mu.Lock()
		moved = r.endedLocked(t, e, res, area0)
		if worker {
			next, nextArea0 = ps.popLocked(res.end)
		}
		r.mu.Unlock()
	case worker:
		next = ps.take(res.end)
	}
	t.tell(ps, x, e, res, worker, moved, next, nextArea0)
	ps.settled() // last: the pass may end, and Run return, right after
	return true, next, nextArea0
}

// tell accounts for t, a task of ps settled with res (its entry e, its
// extra part x), in the Preserver's telemetry: the meter, its span, the
// metrics and progress, its line, and the line of the change of the limit
// it made (moved: logLimit, under no lock). Those call the user's code (the
// MeterProvider's, the TracerProvider's, the log handler), which may panic
// or end the goroutine (runtime.Goexit: t.FailNow in a test's handler),
// with t done and next, the worker's next task (worker), taken. A panic
// ends the process, and a Goexit left the pass's count, next and the
// worker's slot unsettled: the Run waited for its hard deadline
// (docs/faults.md row 3821). Both are recovered here, once for every
// settle: said once in a Run at Error, with the stack (toldOff), and on a
// Goexit the goroutine's work carried on by another (carriedOn).
//
//go:noinline
func (t *task) tell(ps *pass, x *taskExtra, e *Entry, res *result, worker bool, moved limitMove, next *task, nextArea0 float64) {
	r := ps.r
	returned := false
	defer func() {
		if !returned {
			t.toldOff(ps, e, res, worker, next, nextArea0, recover())
		}
	}()
	if moved.to > 0 {
		r.logLimit(moved)
	}
	r.p.tel.inflight.Add(r.ctx, -1)
	endSpan(x, t, res)
	if worker {
		r.record(e, res)
	} else { // abandoned: counted by the outcome the Report gives it
		r.recordAbandoned(t.ei, e, res)
	}
	t.log(r, e, res)
	returned = true
}

// toldOff is tell's recover: v is what the user's code it called panicked
// with, nil when it ended the goroutine (runtime.Goexit). On a Goexit,
// which goes on once this returns, the goroutine's work is carried on
// first (carriedOn), so that the line below, written by the same handler,
// cannot leave it undone; on a panic, settle goes on as usual.
func (t *task) toldOff(ps *pass, e *Entry, res *result, worker bool, next *task, nextArea0 float64, v any) {
	stack := string(debug.Stack())
	how := "ended its goroutine (runtime.Goexit)"
	if v == nil || strings.Contains(stack, "\nruntime.Goexit(") {
		t.carriedOn(ps, res, worker, next, nextArea0)
	}
	if v != nil {
		how = fmt.Sprintf("panicked: %v", v)
	}
	r := ps.r
	if !r.firstLog(loggedTelemetry) {
		return
	}
	defer func() { _ = recover() }() // the same handler may panic again: said once, or not at all
	r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: the Preserver's telemetry (the log handler, the TracerProvider or the MeterProvider) "+how+" as a sandbox settled; the sandbox is settled, and the Run goes on (said once a Run)",
		slog.String("sandbox", e.ID), slog.String("outcome", string(res.outcome)), slog.String("stack", stack))
}

// carriedOn does what settle and its caller would have done after tell
// for t, a task of ps settled with res, whose goroutine ends
// (runtime.Goexit): it counts t settled, and a worker's next task and
// slot go to a new goroutine (carryOn); an abandoning timer's
// (not worker) gives the slot back as abandon would have.
func (t *task) carriedOn(ps *pass, res *result, worker bool, next *task, nextArea0 float64) {
	r := ps.r
	if worker {
		go r.carryOn(ps, res.end, next, nextArea0)
	} else {
		r.workerGone()
		r.sem.Release(1)
	}
	ps.settled()
}

// observe feeds the Estimator and the rate of Sized sandboxes the time of
// the preserve of e, settled with res, if it was preserved. A preserve
// again says little of how long one takes: instant when the server had the
// sandbox paused (a lagging listing), shorter than the first when it
// writes what changed since a resume. e is written already (Entry.end):
// its Duration is the time, taken once for the Report, the Estimator, the
// climber and the metrics, where each took it from the clock readings.
func (r *run) observe(e *Entry, res *result) {
	if res.outcome != Preserved || e.Relisted > 0 {
		return
	}
	if r.cfg.estimator != nil {
		r.cfg.estimator.Observe(e.Duration)
	}
	r.p.rate.observe(e.Size, e.Duration)
}

// final settles a task at the end of its pass: one never started is
// NotStarted, and so is one whose worker is still starting it (its span's
// start, the TracerProvider's, may block: the hard deadline came first,
// and its Preserve is not called); one still running (the hard deadline
// came) is abandoned as TimedOut; all end at *now, which final reads from
// the clock if it is zero (the pass's first such task). It returns the
// outcome it gave, and false if the task had already settled. A task starting at the end of its pass is one
// whose pass Run gave up waiting for at the hard deadline: a pass that
// ends otherwise has all its tasks taken settled.
func (t *task) final(e *Entry, now *time.Time) (res result, changed bool) {
	for {
		s := t.state.Load()
		switch s {
		case stateEntering, stateSettling:
			runtime.Gosched() // a worker is midway; it takes no time
			continue
		case stateDone, stateAbandoned:
			return res, false
		}
		if now.IsZero() {
			*now = time.Now()
		}
		res = result{outcome: NotStarted, end: *now} // queued, or starting
		if s == stateRunning {
			res = result{outcome: TimedOut, end: *now, err: errAbandoned}
		}
		if t.state.CompareAndSwap(s, stateAbandoned) {
			e.fill(t, &res)
			return res, true
		}
	}
}

// preserve writes to res how the preserve of sb, the sandbox of t, a task
// of ps, ended (try). Its caller's frame holds one result where a result
// returned to it was stored twice, and that frame is on the worker's
// stack under the settle that follows: with both, settling a no-op
// preserve grew a worker's stack past its first 2 KiB.
//
//go:noinline
func (t *task) preserve(ps *pass, sb Sandbox, res *result) {
	*res = t.try(ps, sb)
}

// exited settles t, a task of ps whose preserve ended the worker's
// goroutine with runtime.Goexit (t.FailNow in a test's Preserve, a
// library that calls it) in code of the user's: its Preserve (call), or
// what a Preserve's error is given to (failed). It is Failed, not
// retried, with the stack, as a panic is: the Report and the line at Warn
// say why. retried says a retry began (retryBegan). The worker goes with
// its goroutine, so a new goroutine takes its slot and the tasks it would
// have taken. Left to the worker's normal end, nothing settled t nor gave
// its slot back: the sandboxes after it waited for a slot to the phase
// deadline, and the Run for the hard deadline, which called t timed out
// (docs/faults.md rows 3620, 3720). A task abandoned while it ran is the
// Report's if it has not been made (returnedLate), and its worker holds
// no slot.
func (t *task) exited(ps *pass, retried bool) {
	r := ps.r
	stack := string(debug.Stack())
	res := result{outcome: Failed, end: time.Now(), stack: stack,
		err: fmt.Errorf("pause: %s of %s called runtime.Goexit (t.FailNow in a test's?) instead of returning; not preserved, and not retried", exitedIn(stack), ps.tasks.entry(t).ID)}
	r.retryEnded(retried)
	if x := ps.tasks.extra(t); x != nil && x.watch != nil {
		x.watch.Stop()
	}
	ok, next, area0 := t.settle(ps, &res, true, 0) // area0: a failure is no sample of the level
	if !ok {
		t.returnedLate(ps, &res)
		return
	}
	go r.carryOn(ps, res.end, next, area0)
}

// exitedIn names the code of the user's whose runtime.Goexit the stack
// of exited shows: the Preserve, or what its error was given to.
func exitedIn(stack string) string {
	for _, c := range [...]struct{ frame, who string }{
		{"pause.(*run).permanent(", "Config.Permanent, given the error of the Preserve"},
		{"pause.(*run).retryAt(", "an error's RetryAt, the error of the Preserve"},
		{"pause.(*task).afterFailure(", "Config.BackOff's policy, or the error, of the Preserve"},
	} {
		if strings.Contains(stack, c.frame) {
			return c.who
		}
	}
	return "Preserve"
}

// try calls Preserve of sb, the sandbox of t, a task of ps, until it
// succeeds, fails permanently, or no retry fits before the task's
// deadline.
func (t *task) try(ps *pass, sb Sandbox) result {
	var f failures
	ctx := t.ctx(ps)
	for {
		t.attempts.Add(1)
		stack, err := t.call(ps, ctx, sb)
		if err == nil {
			// Apart from failed, whose frames (the failures' cases) under
			// this one pass what a worker's first 2 KiB stack leaves: a
			// preserve that succeeds grows no worker's stack.
			ps.r.retryEnded(f.bo != nil)
			return result{outcome: Preserved, end: time.Now()}
		}
		var res result
		if t.failed(ps, ctx, &f, stack, err, &res) {
			return res
		}
	}
}

// failures is what try keeps of a task's failed attempts: the retry
// policy, made at the first transient failure, and the failure the
// attempt running was made again after.
type failures struct {
	bo     backoff.BackOff
	before error
}

// failed decides what follows the attempt of t, a task of ps, on ctx
// that failed with err (with stack, if it panicked): it writes how the
// preserve ended to res and reports true, or waits for the retry and
// reports false (afterFailure). The user's code it calls (Config.Permanent,
// Config.BackOff's policy, an error's RetryAt) may end the worker's
// goroutine instead of returning (runtime.Goexit: t.FailNow in a test's
// classifier or error type): the task is then settled as the goroutine
// goes (exited), as a Preserve that ends it is (call). Left to the
// worker's normal end, nothing settled the task nor gave its slot back
// (docs/faults.md row 3720). Its check runs on the failures' path alone,
// whose frames are apart from a preserve that succeeds (see try).
func (t *task) failed(ps *pass, ctx context.Context, f *failures, stack string, err error, res *result) bool {
	returned := false
	defer func() {
		if !returned {
			// Its retry began with its policy, before the wait whose
			// RetryAt or policy may have ended it: its attempts say
			// none was made yet (docs/faults.md row 3721).
			t.exited(ps, f.bo != nil)
		}
	}()
	ended := t.afterFailure(ps, ctx, f, stack, err, res)
	returned = true
	return ended
}

// afterFailure is failed's work: the failure's end, or the retry's wait.
func (t *task) afterFailure(ps *pass, ctx context.Context, f *failures, stack string, err error, res *result) bool {
	r := ps.r
	if r.ended(res, ctx, stack, err, f.before) {
		r.retryEnded(f.bo != nil)
		return true
	}
	f.before = err
	if f.bo == nil {
		f.bo = r.cfg.newBackOff(ctx)
		r.retryBegan()
	}
	if again, late := t.retryWait(r, ctx, f.bo.NextBackOff(), err); !again {
		if late != nil {
			err = late
		}
		r.retryEnded(true)
		*res = result{outcome: Failed, end: time.Now(), err: err}
		return true
	}
	return false
}

// ended writes to res how an attempt that returned err (with stack, if it
// panicked) on ctx ends its sandbox, before the failure it was made again
// after, and reports whether it does: not when it failed transiently, and
// a retry may follow.
func (r *run) ended(res *result, ctx context.Context, stack string, err, before error) bool {
	switch {
	case err == nil:
		*res = result{outcome: Preserved, end: time.Now()}
	case stack != "":
		*res = result{outcome: Failed, end: time.Now(), err: err, stack: stack}
	case errors.Is(err, ErrGone):
		*res = result{outcome: Vanished, end: time.Now(), err: err}
	case ctx.Err() != nil:
		*res = result{outcome: TimedOut, end: time.Now(), err: cutAfter(err, before, "attempt")}
	case r.permanent(err):
		*res = result{outcome: Failed, end: time.Now(), err: err}
	default:
		return false
	}
	return true
}

// retryBegan counts a sandbox that failed its first attempt as retrying,
// for the progress line (logProgress); retryEnded, called as its preserve
// ends, uncounts it if it was (retried).
func (r *run) retryBegan() {
	if r.cfg.progress > 0 {
		r.retrying.Add(1)
	}
}

func (r *run) retryEnded(retried bool) {
	if retried && r.cfg.progress > 0 {
		r.retrying.Add(-1)
	}
}

// cutAfter is the error of a call cut by the Run's end or its context,
// err, made again after one that failed with before (nil: none did),
// what the call is ("listing", "attempt"): before is why it was made
// again, and the Report keeps it. Said as err alone, a Report's ListErr
// read "context deadline exceeded" where the server had answered 503
// (docs/faults.md row 1710), and so did the entry of a sandbox whose
// pauses the server failed for minutes, its last one cut by the hard
// deadline, a slow pause (row 1921). An err that names before already
// (httpsource's pause, row 1760; a listing that list made again within
// its pass) is kept as it is.
func cutAfter(err, before error, what string) error {
	if before == nil || strings.Contains(err.Error(), before.Error()) {
		return err
	}
	return fmt.Errorf("%w; the %s before failed: %w", err, what, before)
}

// retryWait waits d before the next attempt on ctx, the task's context, and
// reports whether to make it; when not for err's RetryAt, which ends past
// a deadline, late is err saying so.
// A retry is a new start of Preserve, so it keeps the rule every start
// keeps: none after the phase deadline, nor once Run's context ended
// (drain's Force). Its wait must therefore end by the phase deadline, as
// well as by the sandbox's own deadline (the hard deadline, or
// Config.SandboxTimeout); a timer that fires late, past the phase
// deadline, starts nothing either. Only an attempt already running may
// run on to the hard deadline: a retry that started after the phase
// deadline would take the reserves of the steps after the preserve phase.
// An err that names the time its server asked not to be asked again
// before (RetryAt, see Sandbox) waits until that time instead of d, by
// the listing's rule (serverWait): a time at or past the earlier of the
// two deadlines is not waited for, and the sandbox is not retried.
// An err whose WaitRetry returns (see Sandbox: a key the server refused
// has changed) ends the wait early; with one, a wait that would end past
// a deadline is made to that deadline, and a retry follows only if
// WaitRetry returned before it: a key that comes in the last seconds of
// the phase still gets the sandbox preserved.
func (t *task) retryWait(r *run, ctx context.Context, d time.Duration, err error) (again bool, late error) {
	if d == backoff.Stop || r.phaseOver() {
		return false, nil
	}
	// The retry starts by the earlier deadline: the phase's, the sandbox's.
	now := time.Now()
	limit, deadline := r.phaseEnd(), "the phase deadline"
	if dl, ok := ctx.Deadline(); ok && (limit.IsZero() || dl.Before(limit)) {
		limit, deadline = dl, "the sandbox's deadline"
	}
	if d, late = r.serverWait(err, d, limit, deadline, preserveWords); late != nil {
		return false, late
	}
	w := wakerOf(err)
	end, cut := now.Add(d), false // cut: the policy's wait does not fit, a deadline ends it
	if !limit.IsZero() && end.After(limit) {
		end, cut = limit, true
	}
	if w == nil && cut {
		return false, nil
	}
	if w != nil {
		// Ends with ctx, and with Run's context (drain's Force).
		wctx, cancel := context.WithCancel(ctx)
		defer context.AfterFunc(r.ctx, cancel)()
		defer cancel()
		if !r.sleepOrWake(wctx, end.Sub(now), err, w) || r.ctx.Err() != nil || r.phaseOver() {
			return false, nil
		}
		return !cut || time.Now().Before(end), nil // cut at a deadline: only if woken before it
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return !r.phaseOver(), nil
	case <-ctx.Done():
	case <-r.ctx.Done():
	}
	return false, nil
}

// call runs one attempt of the Preserve of sb, the sandbox of t, a task
// of ps, and turns a panic into an error and its stack, and a typed nil
// error into a permanent one (nilInError). A Preserve that ends the
// worker's goroutine (runtime.Goexit, from a deferred call of its panic
// too) is settled as the goroutine goes (exited). An error whose Error or Unwrap panics (a
// client's error that reads a field of an answer that never came) is
// the Preserve's panic, met here: met later, on the worker outside this
// recover (the Report's entry, errors.Is), it ended the process.
//
// Its recover runs only when Preserve did not return (see returned).
func (t *task) call(ps *pass, ctx context.Context, sb Sandbox) (stack string, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			err = fmt.Errorf("pause: Preserve of %s panicked: %v", ps.tasks.entry(t).ID, v)
			stack = string(debug.Stack())
			if !strings.Contains(stack, "\nruntime.Goexit(") {
				return
			}
			// A deferred call of a runtime.Goexit panicked: the Goexit goes
			// on once its panic is recovered, and call does not return.
		}
		t.exited(ps, t.attempts.Load() > 1) // runtime.Goexit: recover finds no panic; a retry began before a second attempt
	}()
	err = sb.Preserve(ctx)
	returned = true
	if err == nil {
		return "", nil
	}
	id := ps.tasks.entry(t).ID
	if usererr.IsNil(err) { // its name is made only then: no allocation per sandbox
		return "", nilInError(err, "Preserve of "+id, "not counted preserved, and not retried")
	}
	if v, at := usererr.Panics(err); v != nil {
		return string(at), fmt.Errorf("pause: Preserve of %s returned an error (%T) whose Error or Unwrap panicked: %v", id, err, v)
	}
	return "", err
}

// nilInError returns err, or, when err is a typed nil (a nil pointer, map
// or func in a non-nil error: a client's *StatusError returned as an
// error when the server answered 200, Go's FAQ "Why is my nil error value
// not equal to nil?"), a permanent error that says so: who returned it
// and what becomes of it. Such an error's methods dereference nothing
// that is there: its Error or Unwrap, called by errors.Is on a worker
// or by the Report, panicked outside any recover and ended the process
// mid-drain with every sandbox not yet preserved. It is no answer that a
// retry would change, and whether its author meant none is not known.
func nilInError(err error, who, then string) error {
	if err == nil || !usererr.IsNil(err) {
		return err
	}
	return backoff.Permanent(fmt.Errorf("pause: %s returned a nil %T as its error, which is not a nil error: %s", who, err, then))
}

// endSpan ends the span of t, whose extra part is x, if it has one. The
// checks that usually return are apart from the work, so that a worker's
// frames stay small.
func endSpan(x *taskExtra, t *task, res *result) {
	if x != nil && x.span != nil {
		t.endSpanSlow(x.span, res)
	}
}

func (t *task) endSpanSlow(span trace.Span, res *result) {
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

func (t *task) log(r *run, e *Entry, res *result) {
	l := r.cfg.log
	level := slog.LevelDebug
	if res.outcome == Failed || res.outcome == TimedOut {
		level = slog.LevelWarn
	}
	if l.Enabled(r.ctx, level) {
		t.logSlow(r, e, res, level)
	}
}

func (t *task) logSlow(r *run, e *Entry, res *result, level slog.Level) {
	l := r.cfg.log
	attrs := []slog.Attr{
		slog.String("sandbox", e.ID), slog.String("outcome", string(res.outcome)),
		slog.Int("attempts", int(t.attempts.Load())), slog.Duration("took", res.end.Sub(e.Start)),
	}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	l.LogAttrs(r.ctx, level, "pause: sandbox "+string(res.outcome), attrs...)
}

// fill writes the account of t ending with res.
func (e *Entry) fill(t *task, res *result) {
	e.Attempts += int(t.attempts.Load()) // a sandbox preserved again adds its attempts
	e.end(res)
}

// end writes how the last preserve of e ended, res: all of its account
// but the attempts.
func (e *Entry) end(res *result) {
	e.Outcome = res.outcome
	e.End = res.end
	if res.outcome != NotStarted { // Start was set when the task started
		e.Duration = res.end.Sub(e.Start)
	}
	e.Error = "" // a preserve again (Relisted) replaces the account of the one before
	if res.err != nil {
		e.Error = res.err.Error()
	}
	e.Stack = res.stack
}
