package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/budgetconf"
	"github.com/drainkit/drainkit/internal/gracefit"
	"github.com/drainkit/drainkit/internal/logonce"
	"github.com/drainkit/drainkit/internal/planat"
	"github.com/drainkit/drainkit/internal/prestopsleep"
	"github.com/drainkit/drainkit/internal/telemetry"
	"github.com/drainkit/drainkit/internal/usererr"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// scope is the OpenTelemetry instrumentation scope of this package.
const scope = "github.com/drainkit/drainkit/drain"

// The defaults of the zero Config fields.
const (
	defaultPollInterval = time.Second
	defaultInFlightWait = 10 * time.Second
)

// Phase names in the plan and the Report, besides the steps' own names.
const (
	PhaseDrain    = "drain"
	PhaseGate     = "gate"
	PhasePreserve = "preserve"
)

// A Preserver preserves every running sandbox at shutdown and accounts for
// each in its Report. *pause.Preserver is the implementation; a Preserver of
// your own must keep the same contract, since the plan is built on it.
type Preserver interface {
	// Run preserves the sandboxes: no preserve starts after ctx's deadline
	// (the preserve phase's), in-flight ones end by hard (the window's Hard
	// deadline), and Run returns by hard. A Run that has not returned
	// shortly after hard is abandoned and reported Abandoned. A Preserver
	// that also has the method Tighten(hard time.Time) bool, as
	// *pause.Preserver, is told a hard deadline the budget moved earlier
	// during the phase; ctx is then cancelled at the phase's new deadline.
	// One that is not told (no Tighten, or one that panics) learns of the
	// move from ctx alone, and is abandoned shortly after the moved hard
	// deadline, not the one it was called with: the critical steps after
	// the phase keep their reserves before the new SIGKILL.
	// A Run the phase calls after such a move (again, for the sandboxes the
	// creates in flight at the gate started) is given the moved deadlines,
	// as ctx's Deadline and hard.
	Run(ctx context.Context, hard time.Time) *pause.Report
	// Limit is how many preserves at once the plan may count on: the limit
	// where it is fixed or was measured, and no more than the node is known
	// to sustain where it adapts (*pause.Preserver reports 1 until a Run or a
	// learned level has measured one). With Estimator and the running count
	// it makes the preserve phase's live reserve: ceil(running / Limit) x the
	// mean estimate of one preserve, and at least the longest, where a listed
	// sandbox that estimates its own (pause.Estimated) counts with its
	// estimate, and, with a Preserver that also has the method
	// SizeEstimate(size int64) (time.Duration, bool) as *pause.Preserver
	// does, a pause.Sized one with its size at the rate measured (before one
	// is, at the Estimator's estimate for the average size).
	Limit() int
	// Estimator estimates one preserve of a sandbox with no estimate of its
	// own; Run feeds it what it measures. Nil reserves no time for those;
	// one that has observed nothing and estimates zero (the zero value,
	// deadline.NewEstimator(0)) counts as 1 s, pause's default prior,
	// until it observes a preserve: its zero is no measurement.
	Estimator() *deadline.Estimator
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
	// pause.New(Sandboxes, Pause), with Pause's Logger, TracerProvider and
	// MeterProvider taken from this Config where Pause leaves them nil.
	Preserver Preserver
	// Pause configures the default Preserver; its zero value is pause's
	// defaults. With Preserver set it must be zero: New fails naming the
	// fields set, which no one would use.
	Pause pause.Config
	// Gate admits operations; nil means a new Gate that gates every class.
	// Its Exempt must not hold a class that starts a sandbox (Create,
	// Resume, Fork), nor its RetryAfter be negative: New fails naming it.
	Gate *Gate
	// Steps run in order after the preserve phase, each within its
	// reserve.
	Steps []Step
	// PollInterval is how often the preStop wait counts running sandboxes;
	// zero means every second.
	PollInterval time.Duration
	// InFlightWait bounds how long Shutdown waits for admitted operations
	// of gated classes (a create in progress) before preserving; zero
	// means 10 s.
	InFlightWait time.Duration
	// Logger receives the plan at SIGTERM, the phases' progress and the
	// Report once; the default Preserver logs to it too. Nil discards.
	Logger *slog.Logger
	// TracerProvider makes the termination's span and one child span per
	// phase, the preStop wait included, for the Drainer and the default
	// Preserver; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider records phase durations, the headroom, the running
	// sandboxes during the preStop wait and the Gate's rejections, for the
	// Drainer and the default Preserver; nil means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Pod is the pod this process runs in (kube.New), or nil. With it, the
	// Drainer reads the pod's deletion when termination starts, again at
	// each later run of the preStop hook and at SIGTERM, and tightens the
	// budget with the deletion's grace (kubectl delete --grace-period, an
	// eviction). A grace longer than the budget's (kubectl drain
	// --grace-period=600 of a pod whose manifest says 30 s), which the
	// kubelet gives in full, moves SIGKILL later to the deletionTimestamp
	// when that deletion is this pod's and began the termination: the UID
	// known before the drain (POD_UID), no read that found the pod not
	// deleted, the deletion made by T0; otherwise the budget keeps its
	// own, said at Warn. Only the deletion the kubelet's termination
	// started with counts: a later, shorter one changes neither the kubelet's hook wait
	// nor its SIGKILL (v1.34, measured), while the API server moves the
	// deletionTimestamp to the first deletion's time plus the new grace; it
	// is logged and left alone. When the hook runs again (a restarted
	// kubelet), the budget follows that new run (Budget.OnRestart). A drain
	// with no preStop call before SIGTERM has no hook to show it that run:
	// it reads the pod every second during the shutdown and, at a shorter
	// deletion, plans SIGKILL for a kubelet restarted right after it (the
	// new grace from the last read that found the first): early when the
	// kubelet does not restart, never late. A read that finds the pod gone
	// (a force deletion, which the kubelet ends 2 s after SIGTERM) plans
	// that when the pod's UID is known (kube.Config.UID, or an earlier
	// read); unknown, it is a failed read, and so is one after a read
	// before the termination found the name not naming this pod
	// (kube.Pod.Identity: Report.PodMismatch; a static pod's read before
	// the kubelet made its mirror pod is said at Info, and is an error only
	// if the drain's read still finds no pod: kube.Identity.MirrorPending),
	// and so is a static pod's 404 at the drain when no read found the pod
	// (its UID the kubelet's config hash: the API server cannot
	// force-delete a static pod; Report.StaticPod).
	// And it posts Kubernetes Events on the pod: DrainStarted (T0, the
	// expected SIGKILL, the plan as the drain runs it; at a preStop call,
	// once that call's read of the pod answered or failed), SandboxesLost
	// (Warning: how many, which; again for what a step's final sweep lost,
	// see Step), StepFinished or StepFailed for each step (with the ublk
	// step's verdicts), DrainFinished (the Report's counts, every sweep
	// merged in). Neither holds up the
	// drain: reads run in the background, a failed one leaves the budget as
	// it is and is read again every second until a read says something of
	// the deletion; events are dropped when the API server is slow or refuses
	// them (RBAC), and Report.Events counts them. Once the Report is made,
	// Shutdown waits for the events still queued at most 1 s, and never
	// more than half the time left before SIGKILL.
	Pod *kube.Pod
	// KubeletGrace is the grace period the kubelet gives this pod when it
	// terminates the pod on its own, with no deletion through the API
	// server: graceful node shutdown (the slice of shutdownGracePeriod
	// for the pod's priority: shutdownGracePeriod minus
	// shutdownGracePeriodCriticalPods for a pod that is not critical) and
	// a soft node-pressure eviction (evictionMaxPodGracePeriod); the
	// smaller of the two when the node has both. It is the kubelet's
	// configuration, which the pod cannot read, so the manifest states it.
	//
	// With Pod set, a read of the pod that finds no deletionTimestamp at
	// the preStop call or at SIGTERM means the kubelet is terminating the
	// pod itself, and the budget's SIGKILL moves to T0 + KubeletGrace
	// (never later), so the preStop wait ends in time to preserve and run
	// the steps. That stays the end after SIGTERM too, even where the
	// kubelet's arithmetic would leave the container more: under graceful
	// node shutdown the kubelet lets the node go down at the end of its
	// slice. A container the kubelet restarts (a failed liveness
	// probe) also has no deletionTimestamp: that drain, too, ends by
	// KubeletGrace, early rather than late. Zero, the default, means not
	// known: the budget keeps the pod's grace (at most the spec's
	// terminationGracePeriodSeconds, which the same read finds: a Budget
	// built with a longer one is tightened to it), and learns the
	// kubelet's only when SIGTERM arrives with the hook still open, 2 s
	// before SIGKILL (deadline.Budget.OnHookAbandoned). It needs Pod, and
	// must be >= 0. New warns when the work it accepts in the pod's grace
	// does not fit KubeletGrace, naming the smallest that does (drainkit
	// plan's node verdict): a warning, since the node's configuration may
	// not be the pod owner's to change.
	KubeletGrace time.Duration

	// progress hears the Report as it stands at the start of the phases
	// and at each phase's end (internal/drainprogress); nil: none.
	progress func(rep *Report, next string)
	// phasesAt gives the plan's phases with the reserves that follow the
	// grace in use following budget's instead (NewServer's http step: a
	// fortieth of it), for a budget other than Config.Budget (the kubelet's
	// own grace, which New warns of); nil: the phases as they are.
	phasesAt func(budget *deadline.Budget, phases []deadline.Phase) []deadline.Phase
}

// A Drainer takes a node through its termination: the preStop handler, the
// admission Gate, and the single-flight Shutdown. Make one with New at
// start.
//
// A Drainer not made by New (the zero value, or a nil *Drainer) drains
// nothing and says so, never panicking: Shutdown, HandleSignals and
// ServeSignals return at once a Report whose Err names the mistake ("drain:
// Drainer not made by drain.New"), logged at Error through slog.Default;
// PreStop's handler answers 500 saying the same; Force does nothing;
// Terminating and Done are closed, Forced never is; Running is 0; and
// Gate, Budget and Plan return zero values, new at each call (an open Gate
// nothing closes, a Budget with no grace, a Plan with no phase), never
// nil.
type Drainer struct {
	budget    *deadline.Budget
	gate      *Gate
	lister    pause.Lister
	preserver Preserver
	steps     []Step
	phases    []deadline.Phase // the steps' phases, read once
	plan      *deadline.Plan
	planned   []deadline.Phase // the plan's phases: drainDeadline lays them out itself under the kubelet's own termination
	poll      time.Duration
	inflight  time.Duration
	log       *slog.Logger
	tracer    trace.Tracer
	phaseDur  metric.Float64Histogram
	headroom  metric.Float64Gauge
	runGauge  metric.Int64Gauge
	outcomes  metric.Int64Counter

	running atomic.Int64            // last count of running sandboxes
	counted atomic.Bool             // a count has succeeded
	listed  atomic.Pointer[listing] // the last count's sandboxes

	listFails logonce.Failures // the counts failed in a row, and the failure last logged at Warn

	progress func(*Report, string)                                     // Config.progress
	phasesAt func(*deadline.Budget, []deadline.Phase) []deadline.Phase // Config.phasesAt

	pod          *kube.Pod
	kubelet      time.Duration  // Config.KubeletGrace
	own          atomic.Bool    // a read found no deletionTimestamp, with kubelet set: the kubelet's own termination
	podReads     sync.WaitGroup // readPod's reads
	podMu        sync.Mutex     // orders readPod's Go with stopPodReads
	podDone      bool           // stopPodReads was called: no read starts
	rerun        time.Time      // the latest run of the hook after the first (hookAgain); guarded by podMu
	delGrace     time.Duration  // the deletion's grace the first read found: the kubelet's termination keeps it; guarded by podMu
	shortened    bool           // a later read found a shorter one, and it was logged; guarded by podMu
	longer       bool           // the budget took delGrace, longer than its own (longerRead); guarded by podMu
	longerSaid   bool           // longerRead logged why the budget does not take it; guarded by podMu
	undeleted    bool           // a read found the pod with no deletionTimestamp: the kubelet began on its own; guarded by podMu
	blind        bool           // no preStop call came before SIGTERM: no hook shows a kubelet's new run; guarded by podMu
	retrying     bool           // retryRead's reads run; guarded by podMu
	graceSeen    time.Time      // the start of the latest read that found delGrace; guarded by podMu
	misnamedSaid bool           // podRemoved logged a read that misnamed's says nothing of; guarded by podMu
	unfoundSaid  bool           // podRemoved logged a static pod's 404, no read having found the pod; guarded by podMu
	staticSaid   bool           // the plan line or a read said the pod is a static pod (sayStatic); guarded by podMu
	orphanSaid   bool           // orphaned logged another static pod's mirror pod under the pod's name; guarded by podMu
	startID      kube.Identity  // what the reads before New showed (sayPodIdentity); set once, by New
	mirrorRead   chan struct{}  // closed once a read ran to its end, when startID was MirrorPending (awaitMirrorRead); else nil
	mirrorOnce   sync.Once      // closes mirrorRead
	pollFails    logonce.Failures
	podCtx       context.Context
	podStop      context.CancelFunc

	term     context.Context // cancelled when Shutdown starts
	termStop context.CancelFunc
	force    context.Context // cancelled by Force
	forceIt  context.CancelFunc

	mu        sync.Mutex
	prestop   *preStopRun
	root      trace.Span      // the termination's span, from the first preStop call or Shutdown
	rootCtx   context.Context // carries root
	hooks     int             // preStop requests started so far
	hookOpen  bool            // the latest preStop request has not answered yet
	pollsOpen int             // polls without ?start= (pollOfTheRun) not answered yet
	// interrupted: ServeSignals's first signal was not SIGTERM (a person's
	// SIGINT), or its ctx ended with no signal (the server's own reason),
	// so a preStop request still open does not mean the kubelet gave up
	// on it.
	interrupted atomic.Bool
	starting    map[Class]int // operations that start a sandbox in flight when the gate wait timed out (Shutdown's goroutine only)
	hookRun     string        // the latest preStop request's ?start=: which run of the hook it is
	started     bool
	forcedAt    time.Time
	cause       string           // what began the shutdown, as ServeSignals saw it
	signals     []ReceivedSignal // what ServeSignals received, the first maxSignals
	done        chan struct{}
	report      *Report
}

// New validates cfg and returns a Drainer. Errors name the Config field.
// It refuses a plan whose reserves do not fit in the grace period: one
// round of preserves (the Estimator's estimate) and every step's reserve,
// after the budget's margin; with a preStop sleep hook
// (deadline.Config.PreStopSleep), in what SIGTERM leaves of the grace once
// the kubelet's sleep is over. Its error names each reserve and the field
// it comes from, and the sleep, so that a grace too short for the steps
// chosen fails at start, not at SIGTERM with every sandbox lost.
func New(cfg Config) (*Drainer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Drainer{
		budget: cfg.Budget, gate: cfg.Gate, lister: cfg.Sandboxes, preserver: cfg.Preserver,
		steps: cfg.Steps, phases: cfg.stepPhases(), poll: cfg.PollInterval, inflight: cfg.InFlightWait,
		log: cfg.Logger, done: make(chan struct{}), pod: cfg.Pod, kubelet: cfg.KubeletGrace,
		progress: cfg.progress, phasesAt: cfg.phasesAt,
	}
	if d.gate == nil {
		d.gate = &Gate{}
	}
	if d.poll == 0 {
		d.poll = defaultPollInterval
	}
	if d.inflight == 0 {
		d.inflight = defaultInFlightWait
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.preserver == nil {
		pc := cfg.Pause
		if pc.Logger == nil {
			pc.Logger = d.log
		}
		if pc.TracerProvider == nil {
			pc.TracerProvider = cfg.TracerProvider
		}
		if pc.MeterProvider == nil {
			pc.MeterProvider = cfg.MeterProvider
		}
		p, err := pause.New(cfg.Sandboxes, pc)
		if err != nil {
			return nil, fmt.Errorf("drain: Config.Pause: %w", err)
		}
		d.preserver = p
	}
	if err := d.instrument(cfg.TracerProvider, cfg.MeterProvider); err != nil {
		return nil, err
	}
	if err := d.makePlan(cfg.Preserver != nil); err != nil {
		return nil, err
	}
	if d.pod != nil {
		d.sayPodIdentity()
	}
	d.term, d.termStop = context.WithCancel(context.Background())
	d.podCtx, d.podStop = context.WithCancel(context.Background())
	d.force, d.forceIt = context.WithCancel(context.Background())
	return d, nil
}

// kubeletGraceNeedsPod is why the kubelet's own grace is of no use
// without the pod's API access: New's error and NewServer's warning say it.
const kubeletGraceNeedsPod = "only the pod's missing deletionTimestamp tells the kubelet's own termination from a deletion"

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
	for i, s := range cfg.Steps {
		if s == nil || usererr.IsNil(s) {
			return fmt.Errorf("drain: Config.Steps[%d] is nil", i)
		}
		if fs, ok := s.(funcStep); ok && fs.run == nil {
			return fmt.Errorf("drain: Config.Steps[%d]: NewStep was given a nil run function", i)
		}
		if c, ok := s.(interface{ check() error }); ok {
			if err := c.check(); err != nil {
				return fmt.Errorf("drain: Config.Steps[%d]: %w", i, err)
			}
		}
	}
	if cfg.KubeletGrace < 0 {
		return fmt.Errorf("drain: Config.KubeletGrace must not be negative, got %v", cfg.KubeletGrace)
	}
	if cfg.KubeletGrace > 0 && cfg.Pod == nil {
		return fmt.Errorf("drain: Config.KubeletGrace (%v) needs Config.Pod: %s", cfg.KubeletGrace, kubeletGraceNeedsPod)
	}
	if cfg.Gate != nil {
		if cfg.Gate.RetryAfter < 0 {
			return fmt.Errorf("drain: Config.Gate.RetryAfter must not be negative (zero means %v), got %v", defaultRetryAfter, cfg.Gate.RetryAfter)
		}
		for _, c := range cfg.Gate.Exempt {
			if slices.Contains(startClasses, c) {
				// Admitted while draining, it starts a sandbox after the
				// Preserver's last listing: in no Report, lost at SIGKILL.
				return fmt.Errorf("drain: Config.Gate.Exempt holds %q, a class that starts a sandbox (%s, %s, %s): one it starts while the node drains, after the Preserver's last listing, is in no Report and lost at SIGKILL; leave it gated, so that its client goes to another node",
					c, Create, Resume, Fork)
			}
		}
	}
	if cfg.Preserver != nil && usererr.IsNil(cfg.Preserver) {
		return fmt.Errorf("drain: Config.Preserver is a nil %T", cfg.Preserver)
	}
	if set := setFields(cfg.Pause); cfg.Preserver != nil && len(set) > 0 {
		// Pause configures only the default Preserver: left to be ignored,
		// a SandboxTimeout or an Estimator (ConfigFromEnv's, from the
		// manifest's variables) would be planned with by no one.
		return fmt.Errorf("drain: Config.Pause (%s) is set, but so is Config.Preserver, which does not use it: "+
			"give it to the Preserver's pause.New and leave Config.Pause zero (ConfigFromEnv sets its SandboxTimeout from %s and its Estimator from %s)",
			strings.Join(set, ", "), EnvSandboxTimeout, EnvPreserveEstimate)
	}
	return nil
}

// setFields names the fields of c that are not zero.
func setFields(c pause.Config) []string {
	var set []string
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if !v.Field(i).IsZero() {
			set = append(set, v.Type().Field(i).Name)
		}
	}
	return set
}

// stepPhases reads every step's phase once.
func (cfg *Config) stepPhases() []deadline.Phase {
	out := make([]deadline.Phase, len(cfg.Steps))
	for i, s := range cfg.Steps {
		out[i] = s.Phase()
	}
	return out
}

// The metrics the Drainer records, under its scope. See the package
// documentation's Telemetry section for every name, unit and attribute.
const (
	metricPhaseDuration = "drainkit.drain.phase.duration"
	metricHeadroom      = "drainkit.drain.headroom"
	metricRunning       = "drainkit.drain.sandboxes.running"
	metricRejections    = "drainkit.drain.gate.rejections"
	metricOutcomes      = "drainkit.drain.outcomes"

	rejectionsHelp = "Operations the gate rejected because the node is draining, by class."
)

// Span and metric attribute keys.
const (
	attrPhase    = "drainkit.drain.phase"
	attrResult   = "drainkit.drain.result"
	attrReason   = "drainkit.drain.reason"
	attrForced   = "drainkit.drain.forced"
	attrHeadroom = "drainkit.drain.headroom" // seconds
	attrLost     = "drainkit.drain.lost"
	attrRunning  = "drainkit.drain.running"
	attrClass    = "drainkit.drain.class"
	attrOutcome  = "drainkit.drain.outcome"
)

func (d *Drainer) instrument(tp trace.TracerProvider, mp metric.MeterProvider) error {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	d.tracer = tp.Tracer(scope)
	m := mp.Meter(scope)
	var err1, err2, err3, err4, err5 error
	d.phaseDur, err1 = m.Float64Histogram(metricPhaseDuration,
		telemetry.Duration("Duration of each phase of the termination: the preStop wait, the gate wait, the preservation and every teardown step.")...)
	d.headroom, err2 = m.Float64Gauge(metricHeadroom, metric.WithUnit("s"),
		metric.WithDescription("Time left before the expected SIGKILL when the shutdown finished; negative when it finished after."))
	d.runGauge, err3 = m.Int64Gauge(metricRunning, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Running sandboxes at the last count of the preStop wait or the gate phase."))
	rejects, err4 := m.Int64Counter(metricRejections, metric.WithUnit("{operation}"),
		metric.WithDescription(rejectionsHelp))
	d.outcomes, err5 = m.Int64Counter(metricOutcomes, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Sandboxes of the node by their outcome in the drain's final account (the Report's), each counted once."))
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return fmt.Errorf("drain: Config.MeterProvider: %w", err)
	}
	d.gate.setRejects(rejects)
	return nil
}

// makePlan splits the budget into the preStop wait ("drain"), the gate
// wait (at most InFlightWait), the preservation, and one phase per step.
// The preserve reserve is live: running sandboxes x estimate / limit (one
// round before the first count).
func (d *Drainer) makePlan(ownPreserver bool) error {
	phases := []deadline.Phase{
		{Name: PhaseDrain},
		{Name: PhaseGate, Max: d.inflight},
		{Name: PhasePreserve, Reserve: d.preserveReserve},
	}
	seen := map[string]int{}
	for i, ph := range d.phases {
		switch j, dup := seen[ph.Name]; {
		case ph.Name == "":
			return fmt.Errorf("drain: Config.Steps[%d].Phase().Name must not be empty", i)
		case ph.Name == PhaseDrain || ph.Name == PhaseGate || ph.Name == PhasePreserve:
			return fmt.Errorf("drain: Config.Steps[%d].Phase().Name %q is one of the Drainer's own phases", i, ph.Name)
		case dup:
			return fmt.Errorf("drain: Config.Steps[%d].Phase().Name %q duplicates Config.Steps[%d]", i, ph.Name, j)
		case ph.Max < 0:
			return fmt.Errorf("drain: Config.Steps[%d].Phase().Max (%q) must not be negative, got %v", i, ph.Name, ph.Max)
		case ph.Reserve != nil && ph.Reserve() < 0:
			return fmt.Errorf("drain: Config.Steps[%d].Phase().Reserve (%q) must not be negative, got %v", i, ph.Name, ph.Reserve())
		}
		seen[ph.Name] = i
		phases = append(phases, ph)
	}
	p, err := deadline.NewPlan(d.budget, phases...)
	if err != nil {
		return fmt.Errorf("drain: Config.Steps: %w", err)
	}
	if f := planat.Shortfall(p); f.Short > 0 {
		e := d.shortfall(f, ownPreserver)
		e.phases = phases
		return e
	}
	d.plan, d.planned = p, phases
	d.warnKubeletShortfall(phases)
	return nil
}

// warnKubeletShortfall says at Warn, when the work New accepted in the
// pod's grace does not fit the kubelet's own (Config.KubeletGrace), what a
// termination the kubelet makes on its own (graceful node shutdown, a soft
// eviction) would lack, and the smallest kubelet grace that holds it, by
// drainkit plan's rule for the node's verdict (internal/gracefit). New
// accepted it without a word, and an operator learned it when a node
// shutdown lost sandboxes. A warning, not a refusal: the kubelet's grace is
// the node's configuration, which the pod's owner may not set, and every
// deletion through the API server gives the pod's grace, which holds the
// work. A kubelet grace not shorter than the pod's is checked too: the
// node still goes down at T0 + KubeletGrace, before the SIGKILL of the
// kubelet's 2 s after SIGTERM that the pod's plan counts on when a preStop
// sleep leaves less (grace 30 s, sleep 29 s: 500 ms of work, not 1 s).
func (d *Drainer) warnKubeletShortfall(phases []deadline.Phase) {
	if d.kubelet == 0 {
		return
	}
	grace := d.budget.Grace()
	margin, sleep := budgetconf.Of(d.budget)
	c := deadline.Config{Margin: margin, PreStopSleep: sleep}
	at := func(b *deadline.Budget) []deadline.Phase {
		if d.phasesAt != nil {
			return d.phasesAt(b, phases)
		}
		return phases
	}
	short := gracefit.NodeShortfall(grace, d.kubelet, c, at)
	if short == 0 {
		return
	}
	needs := "none up to " + gracefit.Max.String()
	if least := gracefit.SmallestNode(grace, c, at); least > 0 {
		needs = least.String()
	}
	d.log.Warn("drain: the work does not fit the kubelet's own grace: a termination the kubelet makes on its own (graceful node shutdown, a soft eviction) would lose sandboxes; "+
		"raise the node's grace for this pod to what it needs (shutdownGracePeriod less shutdownGracePeriodCriticalPods, or evictionMaxPodGracePeriod, in the KubeletConfiguration: "+
		"drainkit plan -kubelet-config names which) and Config.KubeletGrace ("+EnvKubeletGrace+", or what "+EnvKubeletConfig+"'s file gives) with it",
		"kubelet_grace", d.kubelet, "short", short, "needs", needs)
}

// shortfall is New's error when the reserves do not fit in the grace
// period: f is the plan's figure and the layout it is counted in, whose
// numbers the error names as the plan has them (planat.Shortfall).
func (d *Drainer) shortfall(f planat.Figure, ownPreserver bool) shortfallError {
	e := shortfallError{short: f.Short, left: f.Left, margin: f.Margin, grace: d.budget.Grace(), runOn: f.Layout == planat.RunOn,
		estimate: d.estimator().Estimate(), estField: "Config.Pause.Estimator"}
	if ownPreserver {
		e.estField = "Config.Preserver's Estimator"
	}
	if f.Layout == planat.AfterSleep {
		e.sleep = prestopsleep.Of(d.budget)
	}
	limit := max(d.preserver.Limit(), 1)
	e.rounds = (d.toPreserve() + limit - 1) / limit
	e.preserve = time.Duration(e.rounds) * e.estimate
	for i, ph := range d.phases {
		if ph.Reserve == nil {
			continue
		}
		if r := ph.Reserve(); r > 0 {
			e.steps = append(e.steps, stepReserve{i, ph.Name, r})
		}
	}
	return e
}

// shortfallError is New's error when the reserves do not fit in the
// grace period: it names each reserve and the field it comes from.
// NewServer, whose caller set none of those fields, says it in its own
// words (detail).
type shortfallError struct {
	short, left, grace, margin time.Duration
	sleep                      time.Duration // deadline.Config.PreStopSleep: the kubelet's, before SIGTERM
	runOn                      bool          // left is what the kubelet's 2 s after SIGTERM leave, the preStop wait run on to the grace's end
	preserve, estimate         time.Duration // preserve = rounds x estimate
	rounds                     int
	estField                   string
	steps                      []stepReserve
	phases                     []deadline.Phase // the plan's, for the smallest grace that fits them (NewServer)
	least                      time.Duration    // NewServer's: the smallest grace that fits; 0: none up to gracefit.Max
}

// stepReserve is a step's reserve, for shortfallError.
type stepReserve struct {
	index   int
	name    string
	reserve time.Duration
}

func (e shortfallError) Error() string { return "drain: " + e.detail(true) }

// detail says what does not fit: with fields, naming the Config fields
// each reserve comes from; without, for NewServer, what the caller can
// change.
func (e shortfallError) detail(fields bool) string {
	var b strings.Builder
	switch {
	case e.sleep > 0 && fields:
		fmt.Fprintf(&b, "the reserves need %v more than the %v that deadline.Config.PreStopSleep %v leaves of the grace period %v after the margin %v: ",
			e.short, e.left, e.sleep, e.grace, e.margin)
	case e.sleep > 0:
		fmt.Fprintf(&b, "the reserves need %v more than the %v that the preStop sleep %v (%s, or the pod's spec) leaves of the grace period %v after the margin %v: ",
			e.short, e.left, e.sleep, EnvPreStopSleep, e.grace, e.margin)
	case e.runOn:
		fmt.Fprintf(&b, "the reserves need %v more than the %v that the kubelet's %v after SIGTERM leave after the margin %v, the preStop wait run on to the end of the grace period %v: ",
			e.short, e.left, deadline.MinimumGracePeriod, e.margin, e.grace)
	default:
		fmt.Fprintf(&b, "the reserves need %v more than the %v the grace period %v leaves after the margin %v: ",
			e.short, e.left, e.grace, e.margin)
	}
	if fields {
		fmt.Fprintf(&b, "preserve %v (%s: %d round of %v)", e.preserve, e.estField, e.rounds, e.estimate)
	} else {
		fmt.Fprintf(&b, "preserve %v (%d round of %v, the estimate of one preserve: %s, 1s when unset)", e.preserve, e.rounds, e.estimate, EnvPreserveEstimate)
	}
	for _, s := range e.steps {
		if fields {
			fmt.Fprintf(&b, ", Config.Steps[%d] %s %v", s.index, s.name, s.reserve)
		} else {
			fmt.Fprintf(&b, ", step %s %v", s.name, s.reserve)
		}
	}
	switch {
	case fields:
	case e.least > 0:
		fmt.Fprintf(&b, "; raise the grace period to %ds, the smallest that fits this work (terminationGracePeriodSeconds: %d, and %s if set), or set %s to the time one preserve takes",
			e.least/time.Second, e.least/time.Second, EnvGrace, EnvPreserveEstimate)
	default:
		fmt.Fprintf(&b, "; no grace period up to %v fits this work: set %s to the time one preserve takes", gracefit.Max, EnvPreserveEstimate)
	}
	return b.String()
}

// preserveReserve is the preserve phase's live reserve: rounds of the
// running sandboxes at the Preserver's Limit (the parallelism measured or
// set: a cold adaptive Preserver counts one at a time), each round as long
// as the mean estimate of one preserve (deadline.Work's rule), and never
// less than the longest one. A sandbox that estimates its own preserve
// (pause.Estimated) counts with its estimate, as the Preserver orders and
// paces it, and a Sized one with its size at the Preserver's measured rate
// (sizeEstimator); the others with the Estimator's. Before the Preserver
// has measured a rate, the Sized ones count with the Estimator's too, as a
// Run's prior has the sandbox of the average size take it, and the largest
// of them is the longest at that prior.
func (d *Drainer) preserveReserve() time.Duration {
	est := d.estimator().Estimate()
	l := d.listed.Load()
	if l == nil || l.ownN+l.sizedN == 0 || len(l.ids) == 0 {
		return deadline.Work(d.toPreserve, d.estimator(), d.preserver.Limit)()
	}
	others := max(len(l.ids)-l.ownN, 0)
	mean := meanPreserve(l.ownSum, others, est, l.ownN+others)
	running, k := d.toPreserve(), max(d.preserver.Limit(), 1)
	if running <= 0 {
		return 0
	}
	rounds := int64((running + k - 1) / k)
	if mean > 0 && rounds > math.MaxInt64/int64(mean) {
		return math.MaxInt64
	}
	return max(time.Duration(rounds)*mean, l.ownLong, l.priorLong(est))
}

// meanPreserve is (ownSum + others x est) / n, the mean estimate of one
// preserve, in 128 bits: in 64 an estimate New accepts (a grace of
// thousands of hours) over a few hundred listed sandboxes overflowed to a
// negative mean, and the reserve fell to the longest own estimate. It
// saturates at the largest Duration, as the rounds that multiply it do.
// ownSum, est and n are not negative; n is positive.
func meanPreserve(ownSum time.Duration, others int, est time.Duration, n int) time.Duration {
	hi, lo := bits.Mul64(uint64(others), uint64(est))
	lo, carry := bits.Add64(lo, uint64(ownSum), 0)
	hi += carry
	if hi >= uint64(n) { // the quotient would not fit in 64 bits
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(n))
	return time.Duration(min(q, math.MaxInt64))
}

// unknownPreserve is the estimate of one preserve the plan counts while the
// Preserver's Estimator has observed nothing and estimates zero: pause's
// default Estimator's prior.
var unknownPreserve = deadline.NewEstimator(time.Second) // never observes

// estimator is the Preserver's Estimator as the plan counts it: one that
// has observed nothing and estimates zero (the zero value, NewEstimator(0))
// knows nothing of a preserve's time, as an unknown count says nothing of
// how many run (toPreserve), and counts as unknownPreserve. Taken for
// instant preserves, it reserved the preserve phase no time: the preStop
// wait ran a round of pause's default estimate longer than with no
// Estimator given, and SIGTERM came with no time to preserve in. A nil
// one is the Preserver's word that it has none (see Preserver).
func (d *Drainer) estimator() *deadline.Estimator {
	e := d.preserver.Estimator()
	if e != nil && e.Count() == 0 && e.Estimate() == 0 {
		return unknownPreserve
	}
	return e
}

// toPreserve is the number of sandboxes the preserve reserve plans for: the
// last count, or one round's worth (1) before any count succeeded, since
// an unknown number of sandboxes is not none.
func (d *Drainer) toPreserve() int {
	if !d.counted.Load() {
		return 1
	}
	return int(d.running.Load())
}

// Gate returns the admission gate (a new zero Gate for a Drainer not made
// by New).
func (d *Drainer) Gate() *Gate {
	if !d.made() {
		return &Gate{}
	}
	return d.gate
}

// Budget returns the termination budget (a new zero Budget for a Drainer
// not made by New).
func (d *Drainer) Budget() *deadline.Budget {
	if !d.made() {
		return &deadline.Budget{}
	}
	return d.budget
}

// Plan returns the plan: "drain", "gate", "preserve", then one phase per
// step. Every phase runs under the window the plan gives it by name. It is
// a new zero Plan, with no phase, for a Drainer not made by New.
func (d *Drainer) Plan() *deadline.Plan {
	if !d.made() {
		return &deadline.Plan{}
	}
	return d.plan
}

// Running returns the last count of running sandboxes: the preStop wait's,
// or the one Shutdown takes before the preserve phase.
func (d *Drainer) Running() int {
	if !d.made() {
		return 0
	}
	return int(d.running.Load())
}

// Force switches to force mode: every remaining wait stops at once (the
// preStop wait, the wait for in-flight operations, the start of new
// preserves) and each teardown step that has not finished gets only its
// Reserve from now, within the budget. Force is idempotent and does not
// start a shutdown by itself. Its first call is logged at Warn, so that the
// operator who sent a SIGINT (a second Ctrl-C) sees it taken.
func (d *Drainer) Force() {
	if !d.made() {
		return
	}
	d.mu.Lock()
	first := d.forcedAt.IsZero()
	if first {
		d.forcedAt = time.Now()
	}
	d.mu.Unlock()
	if first {
		d.log.Warn("drain: forced: the remaining waits stop, no new preserve starts, each step left gets only its reserve",
			"terminating", d.term.Err() != nil)
	}
	d.forceIt()
}

// Forced returns a channel closed once Force has been called (never, for
// a Drainer not made by New).
func (d *Drainer) Forced() <-chan struct{} {
	if !d.made() {
		return nil
	}
	return d.force.Done()
}

// Terminating returns a channel closed once Shutdown has started (already
// closed for a Drainer not made by New: its Shutdown returns at once).
func (d *Drainer) Terminating() <-chan struct{} {
	if !d.made() {
		return closedChan()
	}
	return d.term.Done()
}

// Done returns a channel closed once the Report is ready (already closed
// for a Drainer not made by New).
func (d *Drainer) Done() <-chan struct{} {
	if !d.made() {
		return closedChan()
	}
	return d.done
}
