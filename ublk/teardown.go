package ublk

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/ublk"

// Teardown is the ublk device teardown step. Build it with New at server
// start (so bad configuration fails then, not at SIGTERM) and call Run, or
// use Stop as a drain teardown step. See the package documentation for
// the order it follows and what it guarantees.
type Teardown struct {
	cfg      config
	release  string
	class    KernelClass
	decision KernelDecision
	classErr error

	tracer   trace.Tracer
	verdicts metric.Int64Counter
	duration metric.Float64Histogram

	mu   sync.Mutex
	last *Report
}

// New builds a Teardown. It reads the running kernel's release (unless
// WithKernelRelease is given) and classifies it once. It fails on a bad
// option, naming the field.
func New(opts ...Option) (*Teardown, error) {
	cfg := defaults()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	t := &Teardown{cfg: cfg, release: cfg.release}
	if !cfg.releaseSet {
		r, err := kernelRelease()
		if err != nil {
			return nil, err
		}
		t.release = r
	}
	t.decision, t.classErr = DecideKernel(t.release, cfg.decls...)
	t.class = t.decision.Class
	t.tracer = cfg.tp.Tracer(ScopeName)
	meter := cfg.mp.Meter(ScopeName)
	var err error
	if t.verdicts, err = meter.Int64Counter("drainkit.ublk.devices",
		metric.WithDescription("ublk devices torn down, by verdict")); err != nil {
		return nil, err
	}
	if t.duration, err = meter.Float64Histogram("drainkit.ublk.teardown.duration",
		metric.WithUnit("s"), metric.WithDescription("duration of the ublk teardown step")); err != nil {
		return nil, err
	}
	return t, nil
}

// Kernel returns the release string the step classified and its class.
func (t *Teardown) Kernel() (string, KernelClass) { return t.release, t.class }

// KernelDecision returns how the kernel was classified: the class, the
// rule of the table that decided it and the declaration that matched.
func (t *Teardown) KernelDecision() KernelDecision { return t.decision }

// Run tears the devices down in the safe order, inside ctx's deadline:
//
//  1. Find the devices (sysfs, or the IDs given with WithDevices).
//  2. Wait, at most HolderWait, until no process holds a disk open (fds,
//     mounts, swap, stacked devices). If some still do, return a
//     *HeldError without asking the daemon to stop, unless
//     WithStopDespiteHolders.
//  3. Ask the daemon to stop (RequestStop, bounded by RequestTimeout).
//  4. Wait until every device has left sysfs and the daemon has exited,
//     re-reading sysfs every PollInterval.
//  5. Fall back to /dev/ublk-control (STOP_DEV, then DEL_DEV once the
//     daemon is gone) when the request failed, when the daemon exited and
//     left devices, or when ControlReserve+KillReserve before the deadline
//     devices are still live.
//  6. Kill the daemon only when that is safe: once no device is live any
//     more (after ExitGrace), or KillReserve before the deadline on a
//     kernel that is not vulnerable. On a vulnerable kernel a daemon with a
//     live device is never killed: Run waits until the deadline and
//     returns an *UnsafeError.
//
// Run returns by ctx's deadline (plus the time of one sysfs/procfs read).
// The Report is always non-nil and has one DeviceReport per device. The
// error is nil when every device went; otherwise *HeldError, *UnsafeError
// or *IncompleteError (find them with errors.As). On systems other than
// Linux Run does nothing and reports VerdictNothingToDo.
func (t *Teardown) Run(ctx context.Context) (*Report, error) {
	ctx, span := t.tracer.Start(ctx, "ublk.Teardown", trace.WithAttributes(
		attribute.String("kernel.release", t.release), attribute.String("kernel.class", string(t.class))))
	defer span.End()
	var rep *Report
	var err error
	if supported {
		r := newRun(ctx, t)
		err = r.do()
		rep = r.rep
	} else {
		rep = &Report{Kernel: t.release, KernelClass: t.class, KernelDecision: t.decision, Start: time.Now(),
			Verdict: VerdictNothingToDo, Note: "ublk exists only on Linux", Devices: []DeviceReport{}}
	}
	t.observe(ctx, span, rep, err)
	t.mu.Lock()
	t.last = rep
	t.mu.Unlock()
	return rep, err
}

// Stop is Run for callers that want only the error, such as the drain
// orchestrator's teardown step ({Name: "ublk", Run: t.Stop}). The report
// is kept for LastReport.
func (t *Teardown) Stop(ctx context.Context) error {
	_, err := t.Run(ctx)
	return err
}

// LastReport returns the report of the latest Run or Stop that returned,
// or nil before the first.
func (t *Teardown) LastReport() *Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

func (t *Teardown) observe(ctx context.Context, span trace.Span, rep *Report, err error) {
	span.SetAttributes(attribute.String("ublk.verdict", string(rep.Verdict)), attribute.Int("ublk.devices", len(rep.Devices)))
	for _, d := range rep.Devices {
		t.verdicts.Add(ctx, 1, metric.WithAttributes(attribute.String("verdict", string(d.Verdict))))
	}
	t.duration.Record(ctx, rep.Duration.Seconds(), metric.WithAttributes(attribute.String("verdict", string(rep.Verdict))))
	log := t.cfg.logger
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		log.ErrorContext(ctx, "ublk teardown incomplete", "verdict", rep.Verdict, "kernel", rep.Kernel,
			"class", rep.KernelClass, "duration", rep.Duration, "err", err)
		return
	}
	log.InfoContext(ctx, "ublk teardown done", "verdict", rep.Verdict, "devices", len(rep.Devices), "duration", rep.Duration)
}
