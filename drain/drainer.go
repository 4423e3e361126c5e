package drain

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// scope is the OpenTelemetry instrumentation scope of this package.
const scope = "github.com/drainkit/drainkit/drain"

// Defaults for the zero Config fields.
const (
	DefaultPollInterval  = time.Second
	DefaultInFlightWait  = 10 * time.Second
	DefaultPauseEstimate = time.Second
)

// Phase names in the plan and the Report, besides the steps' own names.
const (
	PhaseDrain    = "drain"
	PhaseGate     = "gate"
	PhasePreserve = "preserve"
)

// A Preserver preserves every sandbox a Lister lists, until ctx's deadline
// starts no new preserve and in-flight ones end by hard, and accounts for
// each in its Report. *pause.Preserver is the implementation; Run must
// return by hard.
type Preserver interface {
	Run(ctx context.Context, hard time.Time) *pause.Report
}

// A Config is what New needs. Budget and one of Sandboxes or Preserver are
// required; every other zero field has a working default.
type Config struct {
	// Budget is the pod's termination budget, made at start from its grace
	// period. The preStop handler anchors it; Shutdown refines it.
	Budget *deadline.Budget
	// Sandboxes lists the running sandboxes: the preStop handler waits for
	// it to list none, and the default Preserver preserves what it lists.
	Sandboxes pause.Lister
	// Preserver preserves the sandboxes at shutdown. Nil means
	// pause.New(Sandboxes, PauseOptions..., pause.WithEstimator(Estimator)).
	Preserver Preserver
	// PauseOptions configure the default Preserver.
	PauseOptions []pause.Option
	// Estimator estimates one preserve; with the number of running
	// sandboxes and the Preserver's concurrency it makes the preserve
	// phase's live reserve. Nil means deadline.NewEstimator(DefaultPauseEstimate).
	// Give the same Estimator to a Preserver you build yourself.
	Estimator *deadline.Estimator
	// Gate admits operations; nil means a new Gate that gates every class.
	Gate *Gate
	// Steps run in order after the preserve phase, each within its
	// reserve.
	Steps []Step
	// PollInterval is how often the preStop wait counts running sandboxes.
	PollInterval time.Duration
	// InFlightWait bounds how long Shutdown waits for admitted operations
	// of gated classes (a create in progress) before preserving.
	InFlightWait time.Duration
	// Logger receives the Report once, and the phases' progress. Nil
	// discards.
	Logger *slog.Logger
	// TracerProvider makes a span per phase; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider records phase durations and the margin; nil means
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// A Drainer takes a node through its termination: the preStop handler, the
// admission Gate, and the single-flight Shutdown. Make one with New at
// start.
type Drainer struct {
	budget    *deadline.Budget
	gate      *Gate
	lister    pause.Lister
	preserver Preserver
	est       *deadline.Estimator
	steps     []Step
	plan      *deadline.Plan
	poll      time.Duration
	inflight  time.Duration
	log       *slog.Logger
	tracer    trace.Tracer
	phaseDur  metric.Float64Histogram
	margin    metric.Float64Gauge

	running atomic.Int64 // last count of running sandboxes

	term     context.Context // cancelled when Shutdown starts
	termStop context.CancelFunc
	force    context.Context // cancelled by Force
	forceIt  context.CancelFunc

	mu       sync.Mutex
	prestop  *preStopRun
	started  bool
	forcedAt time.Time
	done     chan struct{}
	report   *Report
}

// New validates cfg and returns a Drainer. Errors name the Config field.
func New(cfg Config) (*Drainer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Drainer{
		budget: cfg.Budget, gate: cfg.Gate, lister: cfg.Sandboxes, preserver: cfg.Preserver,
		est: cfg.Estimator, steps: cfg.Steps, poll: cfg.PollInterval, inflight: cfg.InFlightWait,
		log: cfg.Logger, done: make(chan struct{}),
	}
	if d.gate == nil {
		d.gate = &Gate{}
	}
	if d.est == nil {
		d.est = deadline.NewEstimator(DefaultPauseEstimate)
	}
	if d.poll == 0 {
		d.poll = DefaultPollInterval
	}
	if d.inflight == 0 {
		d.inflight = DefaultInFlightWait
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.preserver == nil {
		p, err := pause.New(cfg.Sandboxes, append(slices.Clip(cfg.PauseOptions), pause.WithEstimator(d.est))...)
		if err != nil {
			return nil, fmt.Errorf("drain: Config.PauseOptions: %w", err)
		}
		d.preserver = p
	}
	if err := d.instrument(cfg.TracerProvider, cfg.MeterProvider); err != nil {
		return nil, err
	}
	if err := d.makePlan(); err != nil {
		return nil, err
	}
	d.term, d.termStop = context.WithCancel(context.Background())
	d.force, d.forceIt = context.WithCancel(context.Background())
	return d, nil
}

func (cfg *Config) validate() error {
	if cfg.Budget == nil {
		return fmt.Errorf("drain: Config.Budget must not be nil")
	}
	if cfg.Sandboxes == nil && cfg.Preserver == nil {
		return fmt.Errorf("drain: Config.Sandboxes or Config.Preserver must be set (nothing to preserve)")
	}
	if cfg.PollInterval < 0 {
		return fmt.Errorf("drain: Config.PollInterval must not be negative, got %v", cfg.PollInterval)
	}
	if cfg.InFlightWait < 0 {
		return fmt.Errorf("drain: Config.InFlightWait must not be negative, got %v", cfg.InFlightWait)
	}
	seen := map[string]bool{PhaseDrain: true, PhaseGate: true, PhasePreserve: true}
	var sum time.Duration
	for i, s := range cfg.Steps {
		switch {
		case s.Name == "":
			return fmt.Errorf("drain: Config.Steps[%d].Name must not be empty", i)
		case seen[s.Name]:
			return fmt.Errorf("drain: Config.Steps[%d].Name %q is a duplicate or a reserved phase name", i, s.Name)
		case s.Run == nil:
			return fmt.Errorf("drain: Config.Steps[%d].Run (%q) must not be nil", i, s.Name)
		case s.Reserve < 0:
			return fmt.Errorf("drain: Config.Steps[%d].Reserve (%q) must not be negative, got %v", i, s.Name, s.Reserve)
		}
		seen[s.Name] = true
		sum += s.Reserve
	}
	if room := cfg.Budget.Grace() - cfg.Budget.Margin(); sum >= room {
		return fmt.Errorf("drain: Config.Steps: reserves sum to %v, which does not fit in the grace period %v minus the margin %v",
			sum, cfg.Budget.Grace(), cfg.Budget.Margin())
	}
	return nil
}

func (d *Drainer) instrument(tp trace.TracerProvider, mp metric.MeterProvider) error {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	d.tracer = tp.Tracer(scope)
	m := mp.Meter(scope)
	var err error
	if d.phaseDur, err = m.Float64Histogram("drain.phase.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of each shutdown phase and teardown step")); err != nil {
		return fmt.Errorf("drain: Config.MeterProvider: %w", err)
	}
	if d.margin, err = m.Float64Gauge("drain.shutdown.margin", metric.WithUnit("s"),
		metric.WithDescription("Time left before the expected SIGKILL when the shutdown finished")); err != nil {
		return fmt.Errorf("drain: Config.MeterProvider: %w", err)
	}
	return nil
}

// makePlan splits the budget into drain, preserve and one phase per step.
// The preserve reserve is live: running sandboxes x estimate / concurrency.
func (d *Drainer) makePlan() error {
	limit := func() int { return 1 }
	if l, ok := d.preserver.(interface{ Limit() int }); ok {
		limit = l.Limit
	}
	phases := []deadline.Phase{
		{Name: PhaseDrain},
		{Name: PhasePreserve, Reserve: deadline.Work(func() int { return int(d.running.Load()) }, d.est, limit)},
	}
	for _, s := range d.steps {
		phases = append(phases, deadline.Phase{Name: s.Name, Reserve: deadline.Fixed(s.Reserve)})
	}
	p, err := deadline.NewPlan(d.budget, phases...)
	if err != nil {
		return fmt.Errorf("drain: Config.Steps: %w", err)
	}
	d.plan = p
	return nil
}

// Gate returns the admission gate.
func (d *Drainer) Gate() *Gate { return d.gate }

// Budget returns the termination budget.
func (d *Drainer) Budget() *deadline.Budget { return d.budget }

// Plan returns the plan: "drain", "preserve", then one phase per step.
func (d *Drainer) Plan() *deadline.Plan { return d.plan }

// Running returns the last count of running sandboxes: the preStop wait's,
// or the one Shutdown takes before the preserve phase.
func (d *Drainer) Running() int { return int(d.running.Load()) }

// Force switches to force mode: every remaining wait stops at once (the
// preStop wait, the wait for in-flight operations, the start of new
// preserves) and each teardown step that has not finished gets only its
// Reserve from now, within the budget. Force is idempotent and does not
// start a shutdown by itself.
func (d *Drainer) Force() {
	d.mu.Lock()
	if d.forcedAt.IsZero() {
		d.forcedAt = time.Now()
	}
	d.mu.Unlock()
	d.forceIt()
}

// Forced returns a channel closed once Force has been called.
func (d *Drainer) Forced() <-chan struct{} { return d.force.Done() }

// Terminating returns a channel closed once Shutdown has started.
func (d *Drainer) Terminating() <-chan struct{} { return d.term.Done() }

// Done returns a channel closed once the Report is ready.
func (d *Drainer) Done() <-chan struct{} { return d.done }
