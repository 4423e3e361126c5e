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

	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/usererr"
)

// errListAbandoned is the listing error when the Lister ignored its context.
var errListAbandoned = errors.New("pause: Lister had not returned by the phase deadline; abandoned")

// list calls the Lister, retrying transient errors with the configured
// backoff while a retry's wait ends before the phase deadline: losing a
// whole node's sandboxes to one failed listing would be the worst outcome.
// A Lister that ignores its context is abandoned at the phase deadline: no
// preserve may start after it, so a later answer is of no use, and waiting
// for it would spend the time the later phases reserved.
//
// A listing that failed after it listed some sandboxes (a paginated
// listing whose later page failed) is returned at once, with its error:
// retrying it here would keep those sandboxes waiting, to the phase
// deadline if the failure lasts. Run preserves them and lists again after
// the pass (see Preserver.Run).
//
// A Run with a phase deadline whose context ended before its first
// listing (a phase the plan left no time, a Force) does not call the
// Lister, whose call would be abandoned at once, and says so: the listing
// error is the Run's, not a Lister's that had no time to answer.
func (r *run) list() ([]Sandbox, error) {
	if !r.phaseEnd().IsZero() && r.phaseOver() {
		// Why it ended: a drain's force says "drain: forced".
		err := context.Cause(r.ctx)
		if err == nil { // the clock passed the phase deadline before its timer fired
			err = context.DeadlineExceeded
		}
		return nil, fmt.Errorf("pause: Run's context had ended before the Lister was called, no time to list: %w", err)
	}
	if r.cfg.progress > 0 { // for the progress line (logProgress)
		r.listingBegan()
		defer r.listing.Store(0)
	}
	var bo backoff.BackOff
	var prev error
	for {
		list, err := r.listOnce()
		if prev != nil && err != nil && len(list) == 0 && (errors.Is(err, errListAbandoned) || r.ctx.Err() != nil) {
			// An attempt abandoned or cut by the Run's end (a server slow
			// to answer under load) says nothing of why listing fails. One
			// that answered, "none", as the Run ended is not cut: the
			// listing succeeded.
			return nil, cutAfter(err, prev, "listing")
		}
		if err == nil || len(list) > 0 || errors.Is(err, errListAbandoned) || r.ctx.Err() != nil || r.permanent(err) {
			return list, err
		}
		prev = err
		r.listingFailed()
		if bo == nil {
			bo = r.cfg.newBackOff(r.ctx)
		}
		// A wait that ended with the phase leaves no time to list in.
		if again, late := r.listWait(err, bo.NextBackOff()); !again || r.phaseOver() {
			if late != nil {
				return nil, late
			}
			return nil, err
		}
	}
}

// listOnce makes one listing: a call of the Lister, and a second one
// beside it if the first has not answered by half the time left to the
// phase deadline (hedge). The first answer of either is the listing's,
// but a failure that listed nothing while the other call still runs: it
// waits for that one, and only both failing fail the listing.
// Bounded by the phase deadline alone, one call hung on a half-open
// connection held the pass to the deadline: a first listing's sandboxes,
// or those a relisting would have found, were never preserved
// (docs/faults.md row 1330). Abandoning the call at the share instead
// would lose a slow listing that answers after it; beside it, a slow one
// still answers. A second call that answers first says so in the
// Report's ListErr. Both calls get the run's context, whose Deadline
// follows Tighten: the one that lost ends with the phase, as an
// abandoned call always has (a context of their own, to end it at once,
// costs a listing allocations).
//
// A Run with no deadline has no half of the time left, and no second call
// until a Tighten gives it a deadline; its call is still made beside the
// Run's goroutine, which a Tighten's deadline (or a cancel) ends the wait
// of: made on it, a call that ignores its context held Run past the
// deadline Tighten set, until it returned.
//
// A call leaves its answer in the listing's listCalls and wakes the Run
// goroutine through run.wake, which it waits on anyway (a Tighten), where
// each listing had a channel of its own to answer on: two allocations of a
// Run (its answers hold pointers, so their buffer is apart), and one more
// channel for every select of the wait to lock. Answers are taken in the
// order the calls gave them, as from a channel. A listing whose every call
// answered leaves its listCalls, emptied, to the next one (run.calls): a
// Run of 10 lists twice. One with a call that did not answer (hedged,
// abandoned) leaves it to that call.
func (r *run) listOnce() ([]Sandbox, error) {
	end := r.phaseEnd()
	calls := r.calls
	if calls == nil {
		calls = new(listCalls)
	}
	r.calls = nil
	start := time.Now()
	go r.listInto(calls, false)
	made, taken := 1, 0   // the calls made, and the answers taken
	var hedge *time.Timer // none while the Run has no deadline: a Tighten makes it (r.wake)
	var hedgeAt <-chan time.Time
	if !end.IsZero() {
		hedge = time.NewTimer(hedgeAfter(start, end))
		hedgeAt = hedge.C
	}
	defer func() {
		if hedge != nil {
			hedge.Stop()
		}
		if taken == made {
			calls.empty()
			r.calls = calls
		}
	}()
	hedged := false
	// failed is the error of a call that failed listing nothing while the
	// other ran. An error, not the answer: the address of an answer
	// taken made every answer a heap allocation.
	var failed error
	for {
		// Before each wait: a call pokes after its answer is there, so an
		// answer that came since the last look is taken before the Run
		// waits again.
		for a, ok := calls.take(taken, made); ok; a, ok = calls.take(taken, made) {
			taken++
			if a.err != nil && len(a.list) == 0 && hedged && failed == nil {
				// The other call still runs: the hung one failing at last (the
				// kernel giving its connection up) or the second failing says
				// nothing of it (docs/faults.md row 1495).
				failed = a.err
				continue
			}
			if a.second && a.err == nil {
				r.rep.ListErr = fmt.Sprintf("pause: a listing had not answered after %v, half the time left to the phase deadline; the one made beside it answered", hedgeAfter(start, end).Round(time.Millisecond))
			}
			if failed != nil && a.err != nil && len(a.list) == 0 {
				return nil, fmt.Errorf("%w; and the call beside it: %w", failed, a.err)
			}
			return a.list, a.err
		}
		select {
		case <-r.wake:
			r.woken()
			// An answer (taken above), or a Tighten that moved the phase
			// deadline: the second call comes at half the time left as it
			// stands (docs/faults.md row 1332). A wake for another (the last
			// settle of the pass before, a worker of it ending; see
			// run.wake) moved nothing.
			moved := r.phaseEnd()
			if moved.Equal(end) {
				continue
			}
			switch end = moved; {
			case hedged:
			case hedge == nil:
				hedge = time.NewTimer(hedgeAfter(start, end) - time.Since(start))
				hedgeAt = hedge.C
			default:
				hedge.Reset(hedgeAfter(start, end) - time.Since(start))
			}
		case <-hedgeAt:
			if r.ctx.Err() != nil {
				continue
			}
			hedged = true
			r.cfg.log.LogAttrs(r.ctx, slog.LevelWarn, "pause: the Lister has not answered in half the time left to the phase deadline; listing again beside it",
				slog.Duration("waited", time.Since(start)), slog.String("time_left", fmtLeft(end)))
			made++
			go r.listInto(calls, true)
		case <-r.ctx.Done():
			// An answer there as the phase ended wins over abandoning it,
			// even one given after a call that has its place and is
			// writing its answer still: taken stays short of made, and
			// calls is left to that call.
			for i := taken; i < made; i++ {
				if a, ok := calls.take(i, made); ok {
					taken++
					return a.list, a.err
				}
			}
			if failed != nil { // the other never answered: the failure says why
				return nil, failed
			}
			return nil, errListAbandoned
		}
	}
}

// listCalls holds the answers of a listing's calls (at most two: the
// first, and the one made beside it), in the order the calls gave them.
// A call claims the next place (given), writes its answer there, and then
// says it is there (ready); the Run goroutine takes them in order, each
// once it is ready.
type listCalls struct {
	answers [2]listAnswer
	given   atomic.Int32
	ready   [2]atomic.Bool
}

// give leaves a, a call's answer, in the next place.
func (c *listCalls) give(a listAnswer) {
	i := c.given.Add(1) - 1
	c.answers[i] = a
	c.ready[i].Store(true)
}

// take returns the answer in place i, one of the made calls' places, if
// it is there.
func (c *listCalls) take(i, made int) (listAnswer, bool) {
	if i >= made || !c.ready[i].Load() {
		return listAnswer{}, false
	}
	return c.answers[i], true
}

// empty makes c as new for the next listing: every call made answered,
// and its answers were taken. It drops the answers' sandboxes, which are
// the Lister's.
func (c *listCalls) empty() {
	c.answers = [2]listAnswer{}
	c.given.Store(0)
	c.ready[0].Store(false)
	c.ready[1].Store(false)
}

// A listAnswer is what a call of the Lister returned; second says it was
// the call made beside another (listOnce).
type listAnswer struct {
	list   []Sandbox
	err    error
	second bool
}

// listInto calls the Lister, leaves its answer in calls and wakes the Run
// goroutine, which takes it (listOnce) or, if the listing is over, never
// looks at it.
//
// A Lister that ends the goroutine (runtime.Goexit: t.FailNow in a test's
// Lister, a library that calls it) gives errListerExited as it goes,
// with the stack logged at Error: a failed listing, retried as a
// panicking Lister's is. With its answer and the wake left to the
// goroutine's normal end, the listing waited for the call made beside
// it, or for the phase deadline, and with no deadline for ever
// (docs/faults.md row 3500).
func (r *run) listInto(calls *listCalls, second bool) {
	a := listAnswer{err: errListerExited, second: second}
	returned := false
	defer func() {
		if !returned { // runtime.Goexit: callList recovered any panic
			r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: Lister called runtime.Goexit",
				slog.String("error", a.err.Error()), slog.String("stack", string(debug.Stack())))
		}
		calls.give(a)
		r.poke()
	}()
	a.list, a.err = r.callList()
	returned = true
}

// errListerExited is the listing error of a call whose Lister ended its
// goroutine instead of returning (listInto).
var errListerExited = errors.New("pause: Lister called runtime.Goexit (t.FailNow in a test's Lister?) instead of returning; the listing failed")

// listHedgeShare is the share of the time left to the phase deadline, as
// a divisor, that a listing is waited for before a second call is made
// beside it (listOnce): half, as drain bounds its count of the running
// sandboxes, leaving the other half to the preserve phase's listing.
const listHedgeShare = 2

// hedgeAfter is how long after start, its call, a listing with the phase
// deadline end is given a second call.
func hedgeAfter(start, end time.Time) time.Duration {
	return end.Sub(start) / listHedgeShare
}

// callList calls the Lister once and turns a panic into an error (logged
// with its stack), which is retried like any other, and a typed nil error
// into a permanent one (nilInError). An error whose Error or Unwrap
// panics is the Lister's panic, met here, with the sandboxes it returned
// kept: met later on Run's goroutine (errors.Is, the Report's ListErr),
// it ended the process.
//
// Its recover runs only when the Lister did not return (see returned).
func (r *run) callList() (list []Sandbox, err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		if v := recover(); v != nil {
			list, err = nil, fmt.Errorf("pause: Lister panicked: %v", v)
			r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: Lister panicked",
				slog.String("error", err.Error()), slog.String("stack", string(debug.Stack())))
		}
	}()
	list, err = r.p.list.List(r.ctx)
	returned = true
	if err == nil {
		return list, nil
	}
	if usererr.IsNil(err) {
		return list, nilInError(err, "the Lister", "the listing failed after the sandboxes it gave, and is not retried")
	}
	if v, at := usererr.Panics(err); v != nil { // list is what it returned
		err = fmt.Errorf("pause: the Lister returned an error (%T) whose Error or Unwrap panicked: %v", err, v)
		r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: Lister panicked",
			slog.String("error", err.Error()), slog.String("stack", string(at)))
	}
	return list, err
}

// permanent reports whether err must not be retried. A Config.Permanent
// that panics (a type assertion that holds for the errors its author
// thought of, a field of a wrapped error that is nil) runs on a worker
// goroutine, where the panic would end the process mid-drain with every
// sandbox not yet preserved: err is retried, as with no classifier, and
// the Run's first such panic is logged at Error with its stack.
func (r *run) permanent(err error) (perm bool) {
	var pe *backoff.PermanentError
	if errors.As(err, &pe) {
		return true
	}
	defer func() {
		if v := recover(); v != nil {
			perm = false
			if r.firstLog(loggedClassifier) {
				r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: Config.Permanent panicked: the errors it panics on are retried as transient ones (logged once per Run)",
					slog.String("error", err.Error()), slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
			}
		}
	}()
	return r.cfg.isPermanent(err)
}

// minListWait is the shortest wait between two listings, whatever
// Config.BackOff asks for: a policy of no wait (backoff.ZeroBackOff, a
// constant of 0, fine for a Preserve's retries) made a Run whose
// listings kept failing after some sandboxes list again at once until the
// phase deadline, a flood of the server's list calls, each logged at Error
// (435,625 in 3 s measured over an instant Lister: a CPU spin). It is the
// default policy's shortest first wait (200 ms, jitter 0.5), which it
// never shortens. A listing's Retry-After does not shorten it either: a
// server answering "Retry-After: 0" to every listing would make the same
// loop.
const minListWait = 100 * time.Millisecond

// maxUnboundedRetryAt bounds the wait for an error's RetryAt in a Run
// with no deadline to keep (serverWait), which still ends (the default
// policy's 5 minutes): a server's Retry-After of a year held it for that
// year.
const maxUnboundedRetryAt = defaultMaxRetryTime

// listWait waits before the listing that failed with err is made again,
// and reports whether to make it; when not for err's Retry-After, which
// ends past the phase deadline, late is err saying so. The
// wait is d, the policy's next (at least minListWait), or the time err's
// RetryAt names (serverWait); not when the policy says Stop, when the
// wait would end past the phase deadline, or when the Run's context ends
// during it. An err whose WaitRetry returns (see Lister: a key the server
// refused has changed) ends the wait early, and one that would end past
// the phase deadline is made to the deadline instead of not at all.
func (r *run) listWait(err error, d time.Duration) (again bool, late error) {
	if d == backoff.Stop || r.ctx.Err() != nil {
		return false, nil
	}
	d, late = r.serverWait(err, d, r.phaseEnd(), "the phase deadline", listingWords)
	if late != nil {
		return false, late
	}
	d = max(d, minListWait)
	w := wakerOf(err)
	if dl, ok := r.ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
		if w == nil {
			return false, nil
		}
		// Its WaitRetry may end the wait before the deadline: waited to
		// it, the listing is made only if it did (its caller finds the
		// phase over otherwise).
		d = time.Until(dl)
	}
	return r.sleepOrWake(r.ctx, d, err, w), nil
}

// retryWords name what serverWait's late error says is not made again.
type retryWords struct{ made, none string }

var (
	listingWords  = retryWords{"listed again", "no listing"}
	preserveWords = retryWords{"retried", "no retry"}
)

// serverWait is the one rule by which a retry keeps to the time the
// server asked for (RetryAt, see Lister and Sandbox), a listing's and a
// Preserve's alike. d is the policy's wait before the retry of what
// failed with err; end is the time by which the retry must start (the
// phase deadline, a sandbox's own if earlier), which deadline names, and
// zero for none. The wait is until the time err names instead, whether
// that is sooner or later than d: retried before it, the server refuses
// again and its capacity is spent on the refusals; after it, the phase's
// time is. With no end it is at most maxUnboundedRetryAt. A time at or
// past end is not waited for: late is err saying so (in words), and no
// retry is made, for the server asked for none before the deadline. A
// zero time, one already past (a Retry-After of 0, one the Preserve
// waited out itself) or a RetryAt that panics names no wait: d stands, so
// a server that says "now" to every attempt gets the policy's waits
// between them, not a retry loop with none.
func (r *run) serverWait(err error, d time.Duration, end time.Time, deadline string, words retryWords) (time.Duration, error) {
	at, ok := r.retryAt(err)
	if !ok {
		return d, nil
	}
	if !end.IsZero() && !at.Before(end) {
		return d, fmt.Errorf("%w (not %s: the answer asks for %s before %s, past %s %s)", err, words.made, words.none,
			at.UTC().Format(time.RFC3339Nano), deadline, end.UTC().Format(time.RFC3339Nano))
	}
	d = time.Until(at)
	if end.IsZero() {
		d = min(d, maxUnboundedRetryAt)
	}
	return d, nil
}

// A retryTimer is an error that carries the time its server asked not to
// be asked again before: an HTTP answer's Retry-After (see Lister).
type retryTimer interface{ RetryAt() time.Time }

// A retryWaker is an error whose cause may go away before a backoff's
// wait ends: WaitRetry returns when a retry may succeed where the attempt
// that failed could not, or when its context ends (see Lister).
type retryWaker interface{ WaitRetry(ctx context.Context) }

// retryAt returns the time err asks its retry to wait for (see
// retryTimer), and whether it asks for one: not with a zero time, nor one
// already past. A RetryAt that panics (a
// field of a wrapped error that is nil) asks for none: err is retried
// with the backoff, and the Run's first such panic is logged at Error.
func (r *run) retryAt(err error) (at time.Time, ok bool) {
	if err == nil { // As's target escapes: no allocation for a listing that succeeded
		return time.Time{}, false
	}
	var rt retryTimer
	if !errors.As(err, &rt) {
		return time.Time{}, false
	}
	defer func() {
		if v := recover(); v != nil {
			at, ok = time.Time{}, false
			r.hintPanicked("RetryAt", err, v)
		}
	}()
	at = rt.RetryAt()
	return at, !at.IsZero() && at.After(time.Now())
}

// wakerOf returns err's WaitRetry (see retryWaker), nil when it has none.
func wakerOf(err error) retryWaker {
	if err == nil { // As's target escapes: no allocation for no error
		return nil
	}
	var w retryWaker
	if !errors.As(err, &w) {
		return nil
	}
	return w
}

// sleepOrWake waits d on ctx, and reports false if ctx ended first. When
// err has a WaitRetry, w (wakerOf), the wait ends when it returns, too: it
// is called with a context that ends with ctx and after d, and is
// abandoned then if it does not return (or panics: logged once per Run).
func (r *run) sleepOrWake(ctx context.Context, d time.Duration, err error, w retryWaker) bool {
	if w == nil {
		return sleepCtx(ctx, d)
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if werr := bounded.Run(wctx, 0, func(ctx context.Context) error {
		w.WaitRetry(ctx)
		return nil
	}); werr != nil && !errors.Is(werr, bounded.ErrAbandoned) {
		r.hintPanicked("WaitRetry", err, werr)
	}
	return ctx.Err() == nil
}

// hintPanicked logs, once per Run, that the method of an error that says
// when to retry panicked: the retry keeps to the backoff.
func (r *run) hintPanicked(method string, err error, v any) {
	if r.firstLog(loggedHint) {
		r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: the "+method+" of an error panicked: its retry keeps to Config.BackOff (logged once per Run)",
			slog.String("error", err.Error()), slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
	}
}

// sleepCtx waits d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
