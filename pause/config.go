package pause

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/usererr"
)

// The defaults of Config's zero fields.
const (
	// defaultLimit is where the adaptive limit starts: eight writers keep
	// an NVMe disk or a 10 Gb/s link busy without thrashing it; the limit
	// then moves to what the node measures.
	defaultLimit = 8
	// defaultMaxLimit is the ceiling of the adaptive limit: beyond 32
	// preserves at once, a node holds too many half-written images for the
	// last ones to finish.
	defaultMaxLimit = 32
	// defaultEstimate is where the default Estimator starts.
	defaultEstimate = time.Second
	// defaultProgressInterval is how often a Run logs a progress line.
	defaultProgressInterval = 10 * time.Second
	// defaultMaxRetryTime bounds the retries of one sandbox (or listing)
	// in the default backoff when no deadline does, so a Run without any
	// deadline still ends.
	defaultMaxRetryTime = 5 * time.Minute
)

// Config configures a Preserver. Its zero value is the default a node
// should want: a limit that adapts from 8 between 1 and 32, the order chosen
// per pass (OrderAuto), no bound per sandbox but Run's deadlines, in-flight
// preserves left to finish until the hard deadline, exponential backoff for
// transient errors while a retry fits before the deadline, the global OpenTelemetry providers, no logging and a
// progress line every 10 s once a logger is set.
type Config struct {
	// Limit is how many preserves run at once. Zero, the default, lets the
	// limit adapt, starting at 8 (or at MaxLimit when that is lower). Set
	// alone, it fixes the limit and turns adaptation off; with a MaxLimit
	// set (at or above it), the limit adapts and Limit is the level it is
	// expected at: how a node's next drain starts from what its last one
	// learned (Report.LearnedLimit). It must be >= 0.
	//
	// Such a Limit is not taken at once: the first Run starts at 8 (or at
	// MaxLimit when lower), as by default, and after its first epoch moves
	// straight to Limit when that epoch agrees with it: Limit above 8 and
	// the epoch's preserves took no longer than their estimates (8 is below
	// the knee), or Limit below 8 and they took longer (8 is past it: even
	// when the deadline binds, Limit is measured before the limit is kept
	// at the level measured fastest). Otherwise the node changed since
	// Limit was learned, and the limit climbs from 8 as by default. The
	// estimates are the sandboxes' own or the Estimator's: give it the
	// estimate of the drain that learned Limit. A start at Limit at once
	// would run a whole round there before a completion could say that the
	// device got slower (thrashing, every preserve of the round late) or
	// faster (a round at a low level); this way the first round is the
	// default one, and a learned Limit only saves the climb. Later Runs
	// start where the last one ended; a Run that ended before its first
	// epoch decided (too few sandboxes, a deadline or a cancel first)
	// tested nothing, and leaves Limit to the next Run. Until a Run has
	// tested it, a Limit below 8 is what Preserver.Limit reports, and so
	// what a deadline.Work reserve counts on: the node was measured past
	// its knee at 8, and a reserve of rounds of 8 there would leave the
	// preserve phase too little time. With no Limit, nothing was
	// measured: Preserver.Limit reports 1 until a Run has measured a
	// preserve, though the Run starts at 8.
	//
	// The adaptive limit measures the node's throughput (bytes per second
	// of preserves completed, when sandboxes are Sized; sandboxes per
	// second when not) and moves toward the smallest limit past which more
	// preserves at once stop adding throughput: it doubles while doubling
	// pays more than 5%, bisects back when it stops paying, halves while
	// halving costs less than 5%, then holds and probes a quarter higher
	// now and then; a move below the level it holds, or a probe, needs
	// four rounds of work queued at the higher of the two levels. While
	// it climbs, a pass OrderAuto orders longest first starts its
	// shortest preserves (up to a quarter of its work). It never leaves
	// [1, MaxLimit], and when the work left at the best throughput
	// measured needs most of the time left, it stops exploring and keeps
	// the limit measured fastest.
	// Preserver.Limit reports it as it moves (once a preserve was
	// measured), and each move is logged at
	// Info ("pause: concurrency changed") with the best throughput
	// measured, best_throughput_bytes_per_s or, when the sandboxes are not
	// Sized, best_throughput_sandboxes_per_s.
	Limit int

	// MaxLimit is the ceiling of the adaptive limit: the most preserves
	// the node may run at once. Zero means 32 when Limit is zero too, and
	// otherwise Limit, which turns adaptation off. It must be >= 0 and,
	// when both are set, >= Limit; set equal to Limit, the limit adapts
	// from the ceiling (a learned limit at the ceiling is a start, not a
	// fixed limit).
	MaxLimit int

	// Order forces the order in which a pass starts sandboxes. The zero
	// value is OrderAuto.
	Order Order

	// SandboxTimeout bounds each sandbox, across all its attempts and
	// backoff waits, to this long from its first attempt. Zero, the
	// default, means no bound of its own: only the deadlines of Run bound
	// it. It must be >= 0.
	SandboxTimeout time.Duration

	// CancelAtDeadline cancels the context of every running preserve at
	// the phase deadline (the deadline of Run's context). False, the
	// default, lets running preserves finish until the hard deadline
	// ("never abort a pause halfway"): a preserve cut at its phase
	// deadline is lost with the time it already spent, while the hard
	// deadline still leaves the later phases their reserves. Either way no
	// new preserve starts after the phase deadline.
	CancelAtDeadline bool

	// BackOff makes the retry policy for transient errors; it is called
	// once for every sandbox that fails its first attempt. Nil, the
	// default, is exponential: 200 ms initial, factor 1.5, jitter 0.5, at
	// most 10 s between attempts, and no bound on their sum while a
	// deadline bounds them (Run's, or the sandbox's own): a sandbox whose
	// pauses fail for 12 min of a 59 min phase (a persistence volume away)
	// is retried until they succeed, and only a wait that would end past
	// the deadline is not made. In a Run with no deadline at all, it stops
	// 5 min after the first failure, so that the Run ends. Whatever the
	// policy, no retry starts whose wait would end past the phase deadline
	// or the sandbox's deadline: a retry is a new start of Preserve; a
	// policy of one's own stops where it says (its MaxElapsedTime, its
	// retries), deadline or not. The waits
	// between listings (a failed one retried, a pass that found only
	// sandboxes listed again) use it too, and are at least 100 ms whatever
	// it asks: a policy of no wait listed in a tight loop. New calls it
	// once and uses that policy (Reset, NextBackOff), and fails if it
	// returns nil (or a typed nil) or panics. An error that names the
	// time to try again (RetryAt), a listing's or a Preserve's, and an
	// error whose WaitRetry returns, shape the wait (see Lister and
	// Sandbox).
	BackOff func() backoff.BackOff

	// Permanent classifies errors that must not be retried, for example a
	// sandbox whose memory file is corrupt. Errors wrapped with
	// backoff.Permanent, and ErrGone, are never retried whatever it says.
	// Nil, the default, retries every other error. New calls it once with
	// a plain error (errors.New) and fails if it panics there (a type
	// assertion on the error that does not hold); an error it panics on
	// during a Run is retried, as with no classifier, and the Run's first
	// such panic is logged at Error with its stack.
	Permanent func(error) bool

	// Estimator is fed with the duration of every successful preserve and
	// estimates the sandboxes that do not implement Estimated;
	// Preserver.Estimator returns it, and drain's plan reserves the
	// preserve phase's time from it. Nil, the default, is a new Estimator
	// that starts at 1 s.
	Estimator *deadline.Estimator

	// TracerProvider is the OpenTelemetry tracer provider; nil means
	// otel.GetTracerProvider(). A Run records a "pause.Run" span and, when
	// that span is recording, a "pause.Preserve" span per sandbox
	// (attributes drainkit.pause.sandbox, .attempts, .outcome); when it is
	// not, no per-sandbox span is started, which keeps the hot path free
	// of allocations.
	TracerProvider trace.TracerProvider

	// MeterProvider is the OpenTelemetry meter provider; nil means
	// otel.GetMeterProvider(). The instruments are listed in the package
	// documentation.
	MeterProvider metric.MeterProvider

	// Logger receives the Run's log lines; nil discards them.
	Logger *slog.Logger

	// ProgressInterval is how often a Run logs a progress line (preserved
	// so far, left, time left; the sandboxes retrying after a failure;
	// while a listing has not answered, how long it has been waited for)
	// at Info level. Zero means every 10 s; a
	// negative interval turns the line off.
	ProgressInterval time.Duration
}

// An Order says which sandboxes a pass starts first. Priority (Prioritized)
// always comes first, whatever the Order; the Order ranks sandboxes of equal
// priority.
type Order int

// The orders a Preserver can use.
const (
	// OrderAuto, the default, chooses per pass from the estimates (own,
	// or from sizes) and the time left: FIFO when no sandbox has an
	// estimate; plain shortest first when the estimated work does not fit
	// before the deadline at the current limit (so the most sandboxes are
	// preserved, whatever the estimates' scale: it needs only their
	// ranks); longest first when it fits (so the whole pass ends soonest),
	// except that while an adaptive limit climbs, the pass starts its
	// shortest preserves (up to a quarter of its work), whose completions
	// the climb learns from soonest.
	OrderAuto Order = iota
	// OrderFIFO starts sandboxes in the order the Lister returned them.
	OrderFIFO
	// OrderShortestFirst preserves the most sandboxes before a deadline
	// when the estimates are exact: it picks the shortest estimated
	// preserves that fit in the time left at the current limit and starts
	// those longest first, so they pack tightly into the slots; the rest
	// follow, shortest first. When the estimates are off in scale, the
	// set overflows and the short ones at its end are lost: OrderAuto
	// uses plain shortest first instead. Without a deadline, or when the
	// pass holds more than one priority, it is plain shortest first within
	// each priority.
	OrderShortestFirst
	// OrderLongestFirst starts the longest estimated preserves first.
	OrderLongestFirst
)

// String returns the order's name as it appears in logs and spans.
func (o Order) String() string {
	switch o {
	case OrderAuto:
		return "auto"
	case OrderFIFO:
		return "fifo"
	case OrderShortestFirst:
		return "shortest_first"
	case OrderLongestFirst:
		return "longest_first"
	}
	return fmt.Sprintf("Order(%d)", int(o))
}

// config is a Config with every default filled in.
type config struct {
	limit            int
	maxLimit         int
	adaptive         bool // the limit adapts between 1 and maxLimit
	order            Order
	timeout          time.Duration
	cancelAtDeadline bool
	userBackOff      func() backoff.BackOff // nil: the default (untilDeadline)
	isPermanent      func(error) bool
	estimator        *deadline.Estimator
	tp               trace.TracerProvider
	mp               metric.MeterProvider
	log              *slog.Logger
	progress         time.Duration // <= 0: off
}

// untilDeadline is the default retry policy (Config.BackOff nil) of what
// is retried on ctx: a sandbox's Preserve (its context), a listing (Run's).
// Its waits are an ExponentialBackOff's with no bound on their sum while
// ctx has a deadline, which bounds them already (no retry starts whose wait
// ends past it); only with none do they stop defaultMaxRetryTime after the
// first failure, so that a Run without a deadline ends. A fixed bound of
// 5 min gave every sandbox up at 5 min of a 59 min preserve phase (AgentENV's
// grace of 3600 s) whose pauses failed for longer: all lost, with most of
// the grace unused (docs/faults.md row 1920). ctx's Deadline is read at
// each wait: a Tighten gives a Run with none one.
type untilDeadline struct {
	backoff.ExponentialBackOff
	ctx context.Context
}

// newUntilDeadline returns the default policy of the retries made on ctx,
// Reset: one allocation, made at the first failure only.
func newUntilDeadline(ctx context.Context) *untilDeadline {
	b := &untilDeadline{ctx: ctx}
	b.InitialInterval = 200 * time.Millisecond
	b.RandomizationFactor = backoff.DefaultRandomizationFactor
	b.Multiplier = backoff.DefaultMultiplier
	b.MaxInterval = 10 * time.Second
	b.Stop = backoff.Stop
	b.Clock = backoff.SystemClock
	b.Reset()
	return b
}

// NextBackOff returns the next wait, or backoff.Stop when ctx has no
// deadline and the wait would end past defaultMaxRetryTime after the
// first failure.
func (b *untilDeadline) NextBackOff() time.Duration {
	elapsed := b.GetElapsedTime()
	next := b.ExponentialBackOff.NextBackOff()
	if _, bounded := b.ctx.Deadline(); !bounded && elapsed+next > defaultMaxRetryTime {
		return backoff.Stop
	}
	return next
}

// newBackOff returns the retry policy, Reset, of what is retried on ctx:
// the user's (Config.BackOff), or the default (untilDeadline).
func (c *config) newBackOff(ctx context.Context) backoff.BackOff {
	if c.userBackOff == nil {
		return newUntilDeadline(ctx)
	}
	b := c.userBackOff()
	b.Reset()
	return b
}

// resolve checks c, naming the offending field, and fills in the defaults.
func (c Config) resolve() (config, error) {
	var errs []error
	if c.Limit < 0 {
		errs = append(errs, fmt.Errorf("pause: Config.Limit must be >= 0, got %d", c.Limit))
	}
	if c.MaxLimit < 0 {
		errs = append(errs, fmt.Errorf("pause: Config.MaxLimit must be >= 0, got %d", c.MaxLimit))
	}
	if c.Limit > 0 && c.MaxLimit > 0 && c.MaxLimit < c.Limit {
		errs = append(errs, fmt.Errorf("pause: Config.MaxLimit must be >= Config.Limit (%d), got %d", c.Limit, c.MaxLimit))
	}
	if c.SandboxTimeout < 0 {
		errs = append(errs, fmt.Errorf("pause: Config.SandboxTimeout must be >= 0, got %v", c.SandboxTimeout))
	}
	if c.Order < OrderAuto || c.Order > OrderLongestFirst {
		errs = append(errs, fmt.Errorf("pause: Config.Order must be one of the defined orders, got %v", c.Order))
	}
	if c.BackOff != nil {
		if err := checkBackOff(c.BackOff); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Permanent != nil {
		if err := checkPermanent(c.Permanent); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return config{}, errors.Join(errs...)
	}
	r := config{
		limit:            c.Limit,
		maxLimit:         c.MaxLimit,
		order:            c.Order,
		timeout:          c.SandboxTimeout,
		cancelAtDeadline: c.CancelAtDeadline,
		userBackOff:      c.BackOff,
		isPermanent:      c.Permanent,
		estimator:        c.Estimator,
		tp:               c.TracerProvider,
		mp:               c.MeterProvider,
		log:              c.Logger,
		progress:         c.ProgressInterval,
	}
	switch {
	case r.limit == 0 && r.maxLimit == 0:
		r.limit, r.maxLimit = defaultLimit, defaultMaxLimit
	case r.limit == 0:
		r.limit = min(defaultLimit, r.maxLimit)
	case r.maxLimit == 0:
		r.maxLimit = r.limit
	}
	// A Limit left zero adapts, also from a MaxLimit at or below the
	// default start, and so does a Limit with a MaxLimit, equal to it
	// included; only a Limit set alone, or a ceiling of 1, fixes it.
	r.adaptive = r.maxLimit > 1 && (c.Limit == 0 || c.MaxLimit > 0)
	if r.isPermanent == nil {
		r.isPermanent = func(error) bool { return false }
	}
	if r.estimator == nil {
		r.estimator = deadline.NewEstimator(defaultEstimate)
	}
	if r.tp == nil {
		r.tp = otel.GetTracerProvider()
	}
	if r.mp == nil {
		r.mp = otel.GetMeterProvider()
	}
	if r.progress == 0 {
		r.progress = defaultProgressInterval
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
		r.progress = 0 // no line to log: no timer to arm per Run
	}
	return r, nil
}

// checkBackOff makes one policy with newBackOff and uses it, as a Run does
// at the first transient error (Reset, then NextBackOff), and says what is
// wrong if it returns nil (or a typed nil) or panics, making or using it (a
// wrapper around a nil policy, backoff.WithMaxRetries(nil, n)): found at
// New, not as a panic that would end the process in the middle of a drain.
func checkBackOff(newBackOff func() backoff.BackOff) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pause: Config.BackOff panicked: %v", v)
		}
	}()
	b := newBackOff()
	if usererr.IsNil(b) {
		return errors.New("pause: Config.BackOff must not return nil: a Run calls it at a sandbox's first transient error, and a nil policy would panic there")
	}
	b.Reset()
	b.NextBackOff()
	return nil
}

// checkPermanent calls isPermanent with a plain error, the kind most
// Preserves return at some point, and says what is wrong if it panics (a
// classifier written as err.(*MyError).Code == 400): found at New, not as
// a panic on a worker in the middle of a drain.
func checkPermanent(isPermanent func(error) bool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("pause: Config.Permanent panicked on a plain error (errors.New): %v; it is called with every error a Preserve or the Lister returns", v)
		}
	}()
	isPermanent(errors.New("pause: New's check of Config.Permanent"))
	return nil
}
