package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/internal/bounded"
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
	var bo backoff.BackOff
	var prev error
	for {
		list, err := r.listOnce()
		if errors.Is(err, errListAbandoned) && prev != nil {
			// The abandoned attempt says nothing of why listing fails.
			return nil, fmt.Errorf("%w; the attempt before failed: %w", err, prev)
		}
		if err == nil || len(list) > 0 || errors.Is(err, errListAbandoned) || r.ctx.Err() != nil || r.permanent(err) {
			return list, err
		}
		prev = err
		if bo == nil {
			bo = r.cfg.newBackOff()
			bo.Reset()
		}
		// A wait that ended with the phase leaves no time to list in.
		if !backoffWait(r.ctx, bo.NextBackOff()) || r.phaseOver() {
			return nil, err
		}
	}
}

func (r *run) listOnce() ([]Sandbox, error) {
	end := r.phaseEnd()
	if end.IsZero() {
		return r.callList()
	}
	ctx, cancel := context.WithDeadline(r.ctx, end)
	defer cancel()
	// The Lister gets the run's context: a listing may finish after the
	// phase deadline for the pass in progress, but none is waited for.
	list, err := bounded.Call(ctx, 0, func(context.Context) ([]Sandbox, error) { return r.callList() })
	if errors.Is(err, bounded.ErrAbandoned) {
		return nil, errListAbandoned
	}
	return list, err
}

// callList calls the Lister once and turns a panic into an error (logged
// with its stack), which is retried like any other.
func (r *run) callList() (list []Sandbox, err error) {
	defer func() {
		if v := recover(); v != nil {
			list, err = nil, fmt.Errorf("pause: Lister panicked: %v", v)
			r.cfg.log.LogAttrs(r.ctx, slog.LevelError, "pause: Lister panicked",
				slog.String("error", err.Error()), slog.String("stack", string(debug.Stack())))
		}
	}()
	return r.p.list.List(r.ctx)
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
			if r.classifierPanicked.CompareAndSwap(false, true) {
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
// never shortens.
const minListWait = 100 * time.Millisecond

// backoffWait sleeps d, at least minListWait, before listing again and
// reports whether to list: not when the policy says Stop, when the wait
// would end past ctx's deadline, or when ctx ends during the wait.
// backoff v4 itself would neither shorten a wait nor skip one whose
// context is over, hence this.
func backoffWait(ctx context.Context, d time.Duration) bool {
	if d == backoff.Stop || ctx.Err() != nil {
		return false
	}
	d = max(d, minListWait)
	if dl, ok := ctx.Deadline(); ok && time.Now().Add(d).After(dl) {
		return false
	}
	return sleepCtx(ctx, d)
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
