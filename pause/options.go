package pause

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
)

// DefaultLimit is where the adaptive limit starts when neither WithLimit
// nor WithMaxLimit is given (and the fixed limit of a Preserver given only
// WithMaxLimit(DefaultLimit)). Eight writers keep an NVMe disk or a
// 10 Gb/s link busy without thrashing it; the limit then moves to what the
// node measures.
const DefaultLimit = 8

// DefaultMaxLimit is the ceiling of the adaptive limit when neither
// WithLimit nor WithMaxLimit is given: beyond 32 preserves at once, a node
// holds too many half-written images for the last ones to finish.
const DefaultMaxLimit = 32

// DefaultEstimate is where the default Estimator starts, before any
// preserve was measured.
const DefaultEstimate = time.Second

// DefaultProgressInterval is how often a Run logs a progress line when
// WithProgressInterval is not given.
const DefaultProgressInterval = 10 * time.Second

// DefaultMaxRetryTime bounds the retries of one sandbox in the default
// backoff, so a Run without any deadline still ends.
const DefaultMaxRetryTime = 5 * time.Minute

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
	// ranks); longest first when it fits (so the whole pass ends soonest).
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

// InFlight says what happens to running preserves when the phase deadline
// (the deadline of Run's context) comes.
type InFlight int

// The in-flight policies.
const (
	// FinishInFlight, the default, lets running preserves go on until the
	// hard deadline ("never abort a pause halfway"); no new preserve starts
	// after the phase deadline. A preserve cut at its phase deadline is
	// lost with the time it already spent, while the hard deadline still
	// leaves the later phases their reserves.
	FinishInFlight InFlight = iota
	// CancelAtDeadline cancels the context of every running preserve at
	// the phase deadline.
	CancelAtDeadline
)

// String returns the policy's name.
func (f InFlight) String() string {
	switch f {
	case CancelAtDeadline:
		return "cancel_at_deadline"
	case FinishInFlight:
		return "finish_in_flight"
	}
	return fmt.Sprintf("InFlight(%d)", int(f))
}

// An Option configures a Preserver.
type Option func(*config)

type config struct {
	limit       int // 0: not set
	maxLimit    int // 0: not set
	order       Order
	timeout     time.Duration
	inFlight    InFlight
	newBackOff  func() backoff.BackOff
	isPermanent func(error) bool
	estimator   *deadline.Estimator
	tp          trace.TracerProvider
	mp          metric.MeterProvider
	log         *slog.Logger
	progress    time.Duration
	limitSet    bool
	maxSet      bool
}

// WithLimit sets how many preserves run at once. Alone, it fixes the limit
// and turns adaptation off; with WithMaxLimit above it, it is where the
// adaptive limit starts. Without it the limit adapts, starting at
// DefaultLimit. It must be at least 1.
//
// The adaptive limit measures the node's throughput (bytes per second of
// preserves completed, when sandboxes are Sized; sandboxes per second when
// not) and moves toward the smallest limit past which more preserves at
// once stop adding throughput: it doubles while doubling pays more than 5%,
// bisects back when it stops paying, halves while halving costs less than
// 5%, then holds and probes a quarter higher now and then. It never leaves
// [1, maximum], and when the work left at the best throughput measured
// needs most of the time left, it stops exploring and keeps the limit
// measured fastest. Limit reports it as it moves.
func WithLimit(n int) Option {
	return func(c *config) { c.limit = n; c.limitSet = true }
}

// WithMaxLimit sets the ceiling of the adaptive limit: the most preserves
// the node may run at once. The default is DefaultMaxLimit when WithLimit
// is not given either, and otherwise the limit, which turns adaptation
// off. It must be at least 1 and at least the limit.
func WithMaxLimit(n int) Option {
	return func(c *config) { c.maxLimit = n; c.maxSet = true }
}

// WithOrder forces the order in which a pass starts sandboxes. The default
// is OrderAuto.
func WithOrder(o Order) Option { return func(c *config) { c.order = o } }

// WithSandboxTimeout bounds each sandbox, across all its attempts and
// backoff waits, to d from its first attempt. Zero, the default, means no
// bound of its own: only the deadlines of Run bound it. It must not be
// negative.
func WithSandboxTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithInFlight sets what happens to running preserves at the phase
// deadline. The default is FinishInFlight.
func WithInFlight(policy InFlight) Option { return func(c *config) { c.inFlight = policy } }

// WithBackOff sets the retry policy for transient errors; newBackOff is
// called once for every sandbox that fails its first attempt. The default
// is exponential: 200 ms initial, factor 1.5, jitter 0.5, at most 10 s
// between attempts, and DefaultMaxRetryTime in all. Whatever the policy, no
// retry starts whose wait would end past the sandbox's deadline.
func WithBackOff(newBackOff func() backoff.BackOff) Option {
	return func(c *config) { c.newBackOff = newBackOff }
}

// WithPermanent sets a classifier for errors that must not be retried, for
// example a sandbox whose memory file is corrupt. Errors wrapped with
// backoff.Permanent, and ErrGone, are never retried whatever it says.
func WithPermanent(isPermanent func(error) bool) Option {
	return func(c *config) { c.isPermanent = isPermanent }
}

// WithEstimator sets the Estimator that is fed with the duration of every
// successful preserve and estimates the sandboxes that do not implement
// Estimated; Preserver.Estimator returns it, and drain's plan reserves the
// preserve phase's time from it. The default starts at DefaultEstimate.
func WithEstimator(e *deadline.Estimator) Option { return func(c *config) { c.estimator = e } }

// WithTracerProvider sets the OpenTelemetry tracer provider. The default is
// otel.GetTracerProvider(). A Run records a "pause.Run" span and, when that
// span is recording, a "pause.Preserve" span per sandbox (attributes
// drainkit.pause.sandbox, .attempts, .outcome); when it is not, no
// per-sandbox span is started, which keeps the hot path free of
// allocations.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the OpenTelemetry meter provider. The default is
// otel.GetMeterProvider(). The instruments are MetricDuration,
// MetricOutcomes and MetricInFlight, each by drainkit.pause.outcome where
// it has one.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithLogger sets the logger. The default discards everything.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithProgressInterval sets how often a Run logs a progress line (preserved
// so far, left, time left) at Info level. The default is
// DefaultProgressInterval; zero turns it off. It must not be negative.
func WithProgressInterval(d time.Duration) Option { return func(c *config) { c.progress = d } }

func defaultBackOff() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(200*time.Millisecond),
		backoff.WithMaxInterval(10*time.Second),
		backoff.WithMaxElapsedTime(DefaultMaxRetryTime),
	)
}

func (c *config) validate() error {
	var errs []error
	switch {
	case c.limitSet && c.limit < 1:
		errs = append(errs, fmt.Errorf("pause: limit must be at least 1, got %d", c.limit))
	case c.maxSet && c.maxLimit < 1:
		errs = append(errs, fmt.Errorf("pause: max limit must be at least 1, got %d", c.maxLimit))
	case c.limitSet && c.maxSet && c.maxLimit < c.limit:
		errs = append(errs, fmt.Errorf("pause: max limit %d must be at least the limit %d", c.maxLimit, c.limit))
	case !c.limitSet && !c.maxSet:
		c.limit, c.maxLimit = DefaultLimit, DefaultMaxLimit
	case !c.limitSet:
		c.limit = min(DefaultLimit, c.maxLimit)
	case !c.maxSet:
		c.maxLimit = c.limit
	}
	if c.timeout < 0 {
		errs = append(errs, fmt.Errorf("pause: sandbox timeout must not be negative, got %v", c.timeout))
	}
	if c.progress < 0 {
		errs = append(errs, fmt.Errorf("pause: progress interval must not be negative, got %v", c.progress))
	}
	if c.order < OrderAuto || c.order > OrderLongestFirst {
		errs = append(errs, fmt.Errorf("pause: order %v is not one of the defined orders", c.order))
	}
	if c.inFlight != CancelAtDeadline && c.inFlight != FinishInFlight {
		errs = append(errs, fmt.Errorf("pause: in-flight policy %v is not one of the defined policies", c.inFlight))
	}
	if c.newBackOff == nil {
		errs = append(errs, errors.New("pause: backoff factory must not be nil"))
	}
	if c.tp == nil {
		errs = append(errs, errors.New("pause: tracer provider must not be nil"))
	}
	if c.mp == nil {
		errs = append(errs, errors.New("pause: meter provider must not be nil"))
	}
	if c.log == nil {
		errs = append(errs, errors.New("pause: logger must not be nil"))
	}
	if c.isPermanent == nil {
		errs = append(errs, errors.New("pause: permanent-error classifier must not be nil"))
	}
	return errors.Join(errs...)
}
