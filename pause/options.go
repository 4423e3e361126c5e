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

// DefaultLimit is the concurrency limit when WithLimit is not given. A
// preserve is dominated by writing memory and disk state to local storage or
// the network; eight writers keep an NVMe disk or a 10 Gb/s link busy without
// thrashing it, and already turn 200 sandboxes x 2 s from 400 s sequential
// into 50 s.
const DefaultLimit = 8

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
	// OrderAuto, the default, chooses per pass from the estimates and the
	// time left: FIFO when no sandbox has an estimate; shortest first when
	// the estimated work does not fit before the deadline even at the
	// maximum limit (so the most sandboxes are preserved); longest first
	// when it fits (so the whole pass ends soonest).
	OrderAuto Order = iota
	// OrderFIFO starts sandboxes in the order the Lister returned them.
	OrderFIFO
	// OrderShortestFirst preserves the most sandboxes before a deadline:
	// it picks the shortest estimated preserves that fit in the time left
	// at the maximum limit and starts those longest first, so they pack
	// tightly into the slots; the rest follow, shortest first. Without a
	// deadline, or when the pass holds more than one priority, it is plain
	// shortest first within each priority.
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
	// CancelAtDeadline, the default, cancels the context of every running
	// preserve at the phase deadline.
	CancelAtDeadline InFlight = iota
	// FinishInFlight lets running preserves go on until the hard deadline
	// ("never abort a pause halfway"); no new preserve starts after the
	// phase deadline.
	FinishInFlight
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
	limit       int
	maxLimit    int // 0: same as limit
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
}

// WithLimit sets the initial concurrency limit: how many preserves run at
// once. The default is DefaultLimit. It must be at least 1.
func WithLimit(n int) Option { return func(c *config) { c.limit = n } }

// WithMaxLimit sets the ceiling the adaptive limit may be raised to when the
// work left does not fit in the time left at the current limit: the number of
// concurrent preserves the disk or network can take. The default is the
// initial limit, which turns adaptation off: going beyond what the operator
// configured could saturate the very device the preserves write to. It must
// be at least the initial limit.
func WithMaxLimit(n int) Option { return func(c *config) { c.maxLimit = n } }

// WithOrder forces the order in which a pass starts sandboxes. The default
// is OrderAuto.
func WithOrder(o Order) Option { return func(c *config) { c.order = o } }

// WithSandboxTimeout bounds each sandbox, across all its attempts and
// backoff waits, to d from its first attempt. Zero, the default, means no
// bound of its own: only the deadlines of Run bound it. It must not be
// negative.
func WithSandboxTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithInFlight sets what happens to running preserves at the phase
// deadline. The default is CancelAtDeadline.
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

// WithEstimator sets an Estimator that is fed with the duration of every
// successful preserve and estimates the sandboxes that do not implement
// Estimated. It is typically the same Estimator the deadline.Plan uses for
// the preserve phase's reserve.
func WithEstimator(e *deadline.Estimator) Option { return func(c *config) { c.estimator = e } }

// WithTracerProvider sets the OpenTelemetry tracer provider. The default is
// otel.GetTracerProvider(). A Run records a "pause.Run" span and, when that
// span is recording, a "pause.Preserve" span per sandbox (attributes
// pause.sandbox, pause.attempts, pause.outcome); when it is not, no
// per-sandbox span is started, which keeps the hot path free of
// allocations.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the OpenTelemetry meter provider. The default is
// otel.GetMeterProvider(). The instruments are MetricDuration,
// MetricOutcomes and MetricInFlight.
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
	if c.limit < 1 {
		errs = append(errs, fmt.Errorf("pause: limit must be at least 1, got %d", c.limit))
	}
	if c.maxLimit == 0 {
		c.maxLimit = max(c.limit, 1)
	}
	if c.maxLimit < c.limit {
		errs = append(errs, fmt.Errorf("pause: max limit %d must be at least the limit %d", c.maxLimit, c.limit))
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
