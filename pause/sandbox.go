package pause

import (
	"context"
	"errors"
	"time"
)

// A Sandbox is one unit of user work on the node that must be preserved
// (paused and persisted, or checkpointed) before the node goes away. A server
// implements it over its own runtime.
//
// ID, and EstimatedPreserve, Size and Priority where it has them, take no
// context: they are called on Run's goroutine as each listing is taken in
// (and by drain as it counts the work left), and must return at once,
// from what the sandbox holds, never asking its runtime. Nothing bounds
// them: one that blocks holds Run, and the phases after it, past every
// deadline (an hour's block in a 10 s phase returns Run after the hour).
// Fetch what they report in the Lister, whose call has a context, or do
// the slow work in Preserve. One that panics is recovered: the sandbox is
// Failed, with the stack.
type Sandbox interface {
	// ID names the sandbox uniquely on the node; the Report is keyed by it.
	ID() string
	// Preserve pauses the sandbox and persists it so it survives the
	// process. It should return when ctx is done; one that does not is
	// abandoned at the hard deadline and reported TimedOut. It returns
	// ErrGone (possibly wrapped) when the sandbox no longer exists or is
	// already preserved. A typed nil error (a nil *T returned as an
	// error) is not a nil one: the sandbox ends Failed at once, not
	// retried, its error naming the type. One that ends its goroutine
	// (runtime.Goexit: t.FailNow in a test's Preserve) fails its sandbox
	// as a panic does, with the stack, not retried, and its slot goes to
	// the next sandbox.
	//
	// ctx.Deadline() is when ctx ends at the latest, so a Preserve can
	// size its work by it (a request's timeout, a cheaper checkpoint when
	// time is short): the hard deadline, or with Config.CancelAtDeadline
	// the phase deadline if earlier, or the end of the sandbox's
	// Config.SandboxTimeout if earlier still; none when Run has no
	// deadline and the sandbox no bound. It is the current one at each
	// call: a Preserver.Tighten during the Preserve moves it earlier (ctx
	// then ends there), so a long Preserve reads it again before each
	// costly step; a context made from ctx (context.WithTimeout) keeps the
	// deadline it was made with, and still ends with ctx. ctx ends before
	// its deadline only when Run's context is cancelled with
	// Config.CancelAtDeadline.
	//
	// An error whose cause may go away before the backoff's wait ends (a
	// refused API key that is being rotated) can end that wait: one with
	// a method WaitRetry(ctx context.Context) in its chain (errors.As) is
	// called for the wait, with a context that ends when the wait would,
	// and the retry starts when it returns. It should return before its
	// context ends only when a retry may be answered otherwise: one that
	// always returns at once makes the retries follow each other with no
	// wait. One that does not return when its context ends is abandoned
	// then. The retry still starts only before the phase deadline (and
	// the sandbox's): a wait the policy would end past it is made to it,
	// and the retry follows only if WaitRetry returned before.
	//
	// An error may say when its server will answer (an API's 429 or 503
	// with Retry-After to a pause, a gRPC server's pushback): one with a
	// method RetryAt() time.Time in its chain that returns a time still
	// to come is retried at that time, not when Config.BackOff says,
	// whether sooner or later (its policy still says whether to retry at
	// all), by the rule a listing's RetryAt keeps (see Lister): a time at
	// or past the phase deadline, or the sandbox's own if earlier (its
	// Config.SandboxTimeout, the hard deadline), is not waited for, and
	// the sandbox ends Failed at once, its error naming that time; with
	// no deadline at all, at most 5 minutes are waited. A zero time, or
	// one already past (a Retry-After of 0, one the Preserve waited out
	// itself), leaves the wait to the policy: a server that says "now" to
	// every attempt gets its waits, not retries with none between them.
	// A Preserve that waits for a Retry-After itself (pause/httpsource
	// does, when it ends before ctx's deadline) returns no such error for
	// it, and the retry is not delayed twice.
	Preserve(ctx context.Context) error
}

// Estimated is implemented by a Sandbox that can estimate how long its
// Preserve takes, for example from its memory size. The Preserver orders by
// it and sizes its concurrency from it, and drain's plan reserves the
// preserve phase's time from it (a Sized sandbox's too, at the rate the
// Preserver has measured: Preserver.SizeEstimate; before, with the
// Estimator's estimate for the average size).
type Estimated interface {
	EstimatedPreserve() time.Duration
}

// Sized is implemented by a Sandbox that knows how many bytes its Preserve
// moves: typically its memory size (the dirty memory a pause writes), or the
// size of the image a checkpoint produces. It is the prior of the sandbox's
// estimate before any preserve has been measured: the Preserver orders by
// size (longest first when time is ample, shortest first when the deadline
// binds) and turns sizes into times with the rate it measures, in bytes per
// second of one preserve, from every sandbox preserved so far; before the
// first measurement a size of the average of the pass counts as the
// Estimator's estimate (Config.Estimator). The adaptive limit measures the
// throughput in these bytes. Zero or a negative size means unknown; one
// whose time passes half the longest Duration (cgroup v1's "no limit"
// taken for a size) is estimated at that half: the longest of its pass. An
// Estimated sandbox's own estimate wins over its size.
type Sized interface {
	Size() int64
}

// Prioritized is implemented by a Sandbox that must be preserved before
// others: higher priorities start first.
type Prioritized interface {
	Priority() int
}

// ErrGone is returned by Preserve (and may be wrapped) when the sandbox is
// already gone or already preserved. The Preserver reports it as Vanished and
// does not retry it.
var ErrGone = errors.New("pause: sandbox gone or already preserved")

// A Lister lists the sandboxes that still need preserving: not one whose
// Preserve succeeded, unless it runs again. The Preserver calls it once
// per pass, so a sandbox that turned running during the drain (a resume
// racing the shutdown, even of a sandbox this Run preserved) is caught,
// and preserved again, by the next pass; a Lister that lists preserved
// sandboxes has them preserved again, pass after pass (see
// Preserver.Run). It must return by ctx's deadline, which a
// Preserver.Tighten during the call may move earlier (ctx then ends there).
// A call that has not answered in half the time left to the phase
// deadline gets a second call beside it, whose answer is taken if it
// comes first (a failure that listed nothing waits for the other call):
// one call hung on a half-open connection does not hold the pass to the
// deadline. So List may be called twice at once, and must be
// safe for it.
//
// A List that fails after it listed some sandboxes (a paginated API whose
// first page answered and a later one failed) returns those with its
// error, as an io.Reader returns the bytes it read before its error. They
// are preserved like any listed ones, and the listing still counts as
// failed: Report.ListErr is set, the listing is made again after the pass
// (with Config.BackOff between listings that find nothing new) as a failed
// listing is retried, and while no listing succeeds the Report is
// Incomplete, its Err saying the node may have more sandboxes than listed.
// Report.Unknown is left for a Run whose failed listings gave no sandbox.
// A List that returns an error with no sandbox, or with sandboxes it is not
// sure of (drop them), is a failed listing, retried within the time left.
// A typed nil error (a nil *T returned as an error) is not a nil one: the
// listing failed, after the sandboxes returned with it, and is not
// retried.
//
// A listing error may say when to list again: one with a method RetryAt()
// time.Time in its chain (errors.As) that returns a time (an HTTP
// answer's Retry-After: pause/httpsource's overloaded listings have it)
// is listed again at that time, not when Config.BackOff says (its policy
// still says whether to list again, and a wait is 100 ms at least); a time
// at or past the phase deadline is not waited for, and no listing is made
// again: Report.ListErr says so. Without a phase deadline, at most 5
// minutes are waited. A zero time, or one already past, names no wait:
// the policy's stands. A Preserve's RetryAt keeps the same rule (see
// Sandbox). One with a method WaitRetry, as a Preserve's error (see
// Sandbox), ends the wait between listings when it returns (a wait past
// the phase deadline made to it, as a Preserve's). Either method
// that panics is ignored, the panic logged once per Run.
type Lister interface {
	List(ctx context.Context) ([]Sandbox, error)
}

// ListFunc adapts a function to a Lister.
type ListFunc func(ctx context.Context) ([]Sandbox, error)

// List calls f(ctx).
func (f ListFunc) List(ctx context.Context) ([]Sandbox, error) { return f(ctx) }
