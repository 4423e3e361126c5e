package ublk

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/telemetry"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/ublk"

// Telemetry names, in the OpenTelemetry semantic-convention style: the
// drainkit.ublk prefix, the unit in the instrument, never in the name.
const (
	metricDevices     = "drainkit.ublk.devices"           // counter ({device}) by verdict
	metricDuration    = "drainkit.ublk.teardown.duration" // histogram (s) by the step's verdict
	attrVerdict       = "drainkit.ublk.verdict"
	attrDevices       = "drainkit.ublk.devices"
	attrKernelRelease = "drainkit.ublk.kernel.release"
	attrKernelClass   = "drainkit.ublk.kernel.class"
	attrStepResult    = "drainkit.ublk.step.result"
	attrStepDuration  = "drainkit.ublk.step.duration" // seconds
	attrStepError     = "drainkit.ublk.step.error"
)

// Teardown is the ublk device teardown step. Build it with New at server
// start (so bad configuration fails then, not at SIGTERM) and call Stop,
// or give it to drain as a teardown step: it has the Phase and Run methods
// of drain.Step, and its phase is critical, so no other phase may spend
// its reserve; drain calls its Tighten when the budget moves SIGKILL
// earlier while it runs (wrapped in a Step of your own, forward Tighten).
// See the package documentation for the order it follows and what it
// guarantees.
//
// A Teardown not made by New (the zero value, or a nil *Teardown) looks at
// no device and stops nothing, and says so: Stop (and Run) returns at once
// a Report with VerdictNotStopped whose Note, and the error, say "ublk:
// Teardown not made by ublk.New"; LastResort is false, Kernel and
// KernelDecision are empty, and Phase is the critical "ublk" phase with no
// reserve.
type Teardown struct {
	cfg      config
	release  string
	class    KernelClass
	decision KernelDecision
	classErr error

	tracer   trace.Tracer
	verdicts metric.Int64Counter
	duration metric.Float64Histogram

	cur atomic.Pointer[run] // the Stop in progress, for Tighten
}

// New builds a Teardown for the devices of daemon, the ublk server
// process (see Daemon; nil when there is none to stop: the step then only
// waits for the devices to go, and uses the control fallback). It reads
// the running kernel's release and classifies it once. It fails on a bad
// Config, naming the field, and on a daemon it could not use: a nil
// *Socket or *Process (pass nil for no daemon), a Socket without a Path,
// a Process not made by FindProcess, alone or as a Socket's.
func New(daemon Daemon, c Config) (*Teardown, error) {
	cfg, err := c.check()
	if err != nil {
		return nil, err
	}
	if err := checkDaemon(daemon); err != nil {
		return nil, err
	}
	cfg.daemon = daemon
	t := &Teardown{cfg: cfg, release: cfg.release}
	if t.release == "" {
		if t.release, err = kernelRelease(); err != nil {
			return nil, err
		}
	}
	t.decision, t.classErr = decideKernel(t.release, cfg.decls...)
	t.class = t.decision.Class
	t.tracer = cfg.tp.Tracer(ScopeName)
	meter := cfg.mp.Meter(ScopeName)
	if t.verdicts, err = meter.Int64Counter(metricDevices, metric.WithUnit("{device}"),
		metric.WithDescription("ublk devices the teardown accounted for, by verdict.")); err != nil {
		return nil, fmt.Errorf("ublk: Config.MeterProvider: %w", err)
	}
	if t.duration, err = meter.Float64Histogram(metricDuration,
		telemetry.Duration("Duration of the ublk teardown step, by its verdict.")...); err != nil {
		return nil, fmt.Errorf("ublk: Config.MeterProvider: %w", err)
	}
	return t, nil
}

// checkDaemon refuses a daemon the step could not stop, wait for or kill,
// so that New fails at server start and not Stop at SIGTERM: a nil
// *Socket or *Process (a typed nil: the interface is not nil; its methods
// panicked, or failed), a Socket without a Path, a Process not made by
// FindProcess, alone or paired with a Socket.
func checkDaemon(daemon Daemon) error {
	switch d := daemon.(type) {
	case *Socket:
		switch {
		case d == nil:
			return errors.New("ublk: New: the daemon is a nil *ublk.Socket (pass nil for no daemon)")
		case d.Path == "":
			return fmt.Errorf("ublk: New: the daemon's %w", errNoPath)
		case d.Process != nil && !d.Process.made():
			return fmt.Errorf("ublk: New: the daemon's Socket.Process: %w", errNotMade)
		}
	case *Process:
		switch {
		case d == nil:
			return errors.New("ublk: New: the daemon is a nil *ublk.Process (pass nil for no daemon)")
		case !d.made():
			return fmt.Errorf("ublk: New: the daemon's %w", errNotMade)
		}
	}
	return nil
}

// Kernel returns the release string the step classified and its class.
func (t *Teardown) Kernel() (string, KernelClass) {
	if !t.made() {
		return "", ""
	}
	return t.release, t.class
}

// KernelDecision returns how the kernel was classified: the class, the
// rule of the table that decided it and the declaration that matched.
func (t *Teardown) KernelDecision() KernelDecision {
	if !t.made() {
		return KernelDecision{}
	}
	return t.decision
}

// notMade is what a Teardown not made by New reports.
const notMade = "ublk: Teardown not made by ublk.New"

// made reports whether t was made by New.
func (t *Teardown) made() bool { return t != nil && t.tracer != nil }

// stepName is the name of the Teardown's phase in a drain plan and Report.
const stepName = "ublk"

// Phase returns the step's place in a drain plan: named "ublk", with the
// reserve set by Config.Reserve, and critical: preserves still in flight must
// end before its window begins, and when the time left is short it gets
// its reserve before any non-critical phase. A daemon killed with live
// devices can crash the host, which costs more than one unfinished pause.
func (t *Teardown) Phase() deadline.Phase {
	if !t.made() {
		return deadline.Phase{Name: stepName, Reserve: deadline.Fixed(0), Critical: true}
	}
	c := &t.cfg
	return deadline.Phase{Name: stepName, Reserve: deadline.Fixed(c.lastResortReserve + c.stopReserve + c.controlReserve + c.killReserve), Critical: true}
}

// LastResort reports whether the step runs the last resort (see
// Config.NoLastResort) when disks are still held open at the last-resort
// point on a kernel not known fixed: true unless Config.NoLastResort or
// Config.StopDespiteHolders is set. On a kernel where killing the daemon
// with live devices is safe (KernelClass.MayKillWithLiveDevices) it never
// runs.
func (t *Teardown) LastResort() bool {
	return t.made() && !t.cfg.lastResortOff && !t.cfg.stopDespite
}

// Run is Stop for the drain orchestrator (drain.Step): it returns the
// *Report as the step's detail, which the drain Report carries.
func (t *Teardown) Run(ctx context.Context) (any, error) {
	return t.Stop(ctx)
}

// Stop tears the devices down in the safe order, inside ctx's deadline:
//
//  1. Find the devices (sysfs, or Config.Devices); a sysfs that cannot
//     be read is read again every PollInterval until the holder wait's
//     end, and only then does Stop give up (VerdictNotStopped). With no
//     device, and no daemon or one that is not running (its Wait, looked
//     at once, says it exited; not a DaemonFuncs without WaitFunc), Stop
//     returns VerdictNothingToDo at once, the Note saying why (the ublk
//     module not loaded, when sysfs has no ublk class). Each
//     later read of sysfs while the step waits (every PollInterval) finds
//     too a device added since (without Config.Devices: another server's
//     left alone as at the start) or a listed one that was not there: it
//     is the step's like the others from then on.
//  2. Wait, at most HolderWait and never past the last-resort point (where
//     only the step's reserve is left), until nothing holds a disk (a
//     process's fd or memory mapping of the node, a process's io_uring
//     with the node among its registered files, a mount, swap, a stacked
//     device, a loop device backed by the disk) or may: a process whose
//     mappings or rings' registered files the kernel did not show (a
//     possible holder) is scanned again every PollInterval until it is
//     known, and is a holder until then. No scan reads procfs past the end
//     of the last resort's part of the reserve: the processes it did not
//     reach by then are a possible holder too, and each keeps what the
//     last scan that read it found.
//  3. If some still do, on a kernel not known fixed and under a deadline,
//     run the last resort (unless Config.NoLastResort), within its part of
//     the reserve: SIGKILL every holder inside this process's own cgroup
//     (doomed by the pod's SIGKILL anyway; pinned with a pidfd and waited
//     for), then STOP_DEV through /dev/ublk-control every device no holder
//     is left on (the holds of this process, of the daemon when its
//     process is known, and of any process with one of the devices'
//     /dev/ublkcN open, which the driver lets only a device's server
//     open, do not count: they are the server). A process
//     mapping a disk, holding it through an io_uring's registered files,
//     or a possible holder (killed when, checked again, what it holds is
//     still not known) is a holder like one with an fd. Holders outside
//     the cgroup (another pod, the host), mounts, swap, stacked devices and
//     loop devices (kernel state: no kill releases them) are never killed,
//     nor is the daemon or a ublk server of the step's devices (one with
//     its /dev/ublkcN open or mapped, its PID known to the step or not:
//     a daemon known by its functions or socket alone, a per-device
//     server it forked); Report.LastResort names every holder, killed or
//     spared, and why. A possible holder no kill released (outside the
//     cgroup, or where the last resort does not run) is set aside: not
//     known to hold a disk, it keeps none from stopping (the Report's
//     "possible holders" step names it). A device still held then whose
//     daemon is in this process's cgroup (it dies at the pod's SIGKILL,
//     and the kernel stops the device with it) is stopped under its
//     holders with STOP_DEV while the daemon serves it (the device's
//     "stop under holders" step says why), and Stop returns a
//     *StoppedHeldError once the daemon's stop is over. One with
//     UBLK_F_USER_RECOVERY too, its recovery given up: on a kernel not
//     known fixed, where alone the last resort runs, its daemon's death
//     with it live is the same crash race. If a device is still held after that, or where the last
//     resort does not run, return a *HeldError without asking the daemon
//     to stop (the daemon keeps serving the held device), unless
//     Config.StopDespiteHolders.
//  4. Ask the daemon to stop (RequestStop, bounded by RequestTimeout). A
//     request sent and not answered (ErrUnconfirmed: a daemon already
//     stopping reads none) is taken as delivered. A daemon that has
//     exited by then (its Wait, looked at once, says so; not a DaemonFuncs
//     without WaitFunc) is not asked: the "request stop" step says so,
//     and the devices it stopped itself say "by the daemon".
//  5. Wait until every device has left sysfs and the daemon has exited,
//     re-reading sysfs every PollInterval.
//  6. Fall back to /dev/ublk-control (STOP_DEV, then DEL_DEV once the
//     daemon is gone) when the request failed, when the daemon exited and
//     left devices, or when devices are still live once only the control
//     fallback's and the kill's parts of the reserve are left; a device
//     found live after the fallback ran (added since, a listed one seen
//     late) gets a fallback of its own, for the same reasons. A
//     STOP_DEV not answered in its window runs on in the driver: the
//     step asks GET_DEV_INFO every PollInterval whether the device is
//     DEAD, that is, whether it completed. Once the
//     daemon is gone, a device that may be waiting for the next server
//     to recover it is left alone ("kept for recovery"): one QUIESCED or
//     FAIL_IO, one with UBLK_F_USER_RECOVERY, or one whose flags
//     GET_DEV_INFO did not give and whose disk is still there.
//  7. Kill the daemon only when that is safe: once no device is live any
//     more (after ExitWait), or, on a kernel that is not vulnerable, when
//     only the kill's part of the reserve is left. On a vulnerable kernel a
//     daemon with a live device is never killed: Stop waits until the
//     deadline and returns an *UnsafeError. Nor is one that still serves
//     a disk in sysfs that is not among the step's devices (it has the
//     disk's /dev/ublkcN open or mapped: one left out by Config.Devices, taken
//     for another server's, or one with the ID of a device of the step's
//     that went, which the kernel gives to the next ADD_DEV), when the
//     step knows its PID: looked for
//     right before the kill, such a disk joins the Report as one of the
//     step's, live. Without its PID (DaemonFuncs with no PidFunc) there are
//     no fds to read: a live disk not the step's is then the daemon's
//     unless it is another server's (its /dev/ublkcN open outside the
//     cgroup above the server's), and while one is the step cannot tell.
//     When sysfs, or the daemon's fds or mappings, cannot be read to look
//     (EMFILE or ENOMEM in the server), the daemon is not killed
//     either while the step cannot tell: the pod's SIGKILL ends it at the
//     deadline anyway, and killing it sooner is no safer. The step looks again at every poll;
//     the Report's "served by the daemon" step says why, and its Note
//     and Daemon.CannotTell when the daemon was left running so (a
//     process whose exit kills the daemon must then wait for it).
//
// Stop returns by ctx's deadline (plus the time of one sysfs/procfs read).
// The Report is always non-nil and has one DeviceReport per device. The
// error is nil when every device went with nothing on it; otherwise
// *HeldError, *UnsafeError or *IncompleteError, and *StoppedHeldError
// beside any of them or alone when the last resort stopped a held device
// (find them with errors.As), or the error of a Teardown not made by New
// (see Teardown). On systems other than Linux Run does nothing and reports
// VerdictNothingToDo.
func (t *Teardown) Stop(ctx context.Context) (*Report, error) {
	if !t.made() {
		rep := &Report{Start: time.Now(), Verdict: VerdictNotStopped, Devices: []DeviceReport{},
			Note: notMade + ": no device was looked at, none stopped, the daemon was not asked to stop"}
		rep.Deadline, _ = ctx.Deadline()
		return rep, errors.New(rep.Note)
	}
	ctx, span := t.tracer.Start(ctx, "ublk.Teardown", trace.WithAttributes(
		attribute.String(attrKernelRelease, t.release), attribute.String(attrKernelClass, string(t.class))))
	defer span.End()
	var rep *Report
	var err error
	if supported {
		r := newRun(ctx, t)
		t.cur.Store(r) // before plan: a Tighten from now on reaches the run
		r.plan()
		err = r.do()
		t.cur.CompareAndSwap(r, nil)
		rep = r.rep
	} else {
		rep = &Report{Kernel: t.release, KernelClass: t.class, KernelDecision: t.decision, Start: time.Now(),
			Verdict: VerdictNothingToDo, Note: "ublk exists only on Linux", Devices: []DeviceReport{}}
	}
	t.addStopNote(rep)
	t.observe(ctx, span, rep, err)
	return rep, err
}

// Tighten moves the deadline of the Stop (or Run) in progress earlier, to
// dl, and reports whether it moved it: the stages that are not over (the
// holder wait, the last resort, the daemon's own stop, the control
// fallback, the kill: see Stop) are laid out again from now to dl, by the
// rule that laid them out in ctx's deadline, and the run's wait wakes to
// follow them. What runs as it moves (a stop request, a control command,
// a holders scan) ends by its stage's new end, and the stages after it
// keep their part of the time left. The holder wait never ends later than
// it would have. It never moves the deadline later; a Stop without a
// deadline takes dl as its first. With no Stop in progress, on a Teardown
// not made by New, with the zero time (no deadline), or on a system other
// than Linux, it does nothing and returns false. It is safe to call
// concurrently with Stop.
//
// Tighten does not end Stop: cancel its context at dl as well (drain does,
// and calls Tighten first, when its budget moves SIGKILL earlier while the
// step runs: see drain.Step). Cancelled alone at an earlier time, Stop
// still had its stages where ctx's deadline put them, and ran none of the
// late ones: with a hung daemon, only the stop request was sent, and the
// pod's SIGKILL killed the daemon with its devices live.
func (t *Teardown) Tighten(dl time.Time) bool {
	if !t.made() || dl.IsZero() {
		return false
	}
	r := t.cur.Load()
	return r != nil && r.tighten(dl)
}

// addStopNote ends rep's Note with the caller's (ublkhook.Hooks.StopNote),
// before observe logs it.
func (t *Teardown) addStopNote(rep *Report) {
	if t.cfg.stopNote == nil {
		return
	}
	switch note := t.cfg.stopNote(); {
	case note == "":
	case rep.Note == "":
		rep.Note = note
	default:
		rep.Note += "; " + note
	}
}

func (t *Teardown) observe(ctx context.Context, span trace.Span, rep *Report, err error) {
	span.SetAttributes(attribute.String(attrVerdict, string(rep.Verdict)), attribute.Int(attrDevices, len(rep.Devices)))
	for _, d := range rep.Devices {
		t.verdicts.Add(ctx, 1, metric.WithAttributes(attribute.String(attrVerdict, string(d.Verdict))))
	}
	t.duration.Record(ctx, rep.Duration.Seconds(), metric.WithAttributes(attribute.String(attrVerdict, string(rep.Verdict))))
	log := t.cfg.logger
	// The Note says why the step ended as it did (nothing to do and why, a
	// daemon gone before it was asked, a recovery given up): the log line
	// carries it, not the JSON alone.
	var note []any
	if rep.Note != "" {
		note = []any{"note", rep.Note}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		log.ErrorContext(ctx, "ublk teardown incomplete", append([]any{"verdict", rep.Verdict, "kernel", rep.Kernel,
			"class", rep.KernelClass, "duration", rep.Duration, "err", err}, note...)...)
		return
	}
	log.InfoContext(ctx, "ublk teardown done", append([]any{"verdict", rep.Verdict, "devices", len(rep.Devices), "duration", rep.Duration}, note...)...)
}
