package ublk

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/drainkit/drainkit/internal/blockdev"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// defaultReserve is the time a Teardown keeps for itself when
// Config.Reserve is zero: what the last resort, the daemon's own stop, the
// /dev/ublk-control fallback and the kill need.
const defaultReserve = 10 * time.Second

// Config configures a Teardown; New checks it and names the offending
// field. The zero value is the safe default: every ublk device sysfs
// shows but another server's, the running kernel classified by the built-in table, a reserve of
// 10 s, the last resort and the /dev/ublk-control fallback on,
// telemetry to the global OpenTelemetry providers and logs discarded.
type Config struct {
	// Devices limits the step to these device IDs, as the server knows
	// them; empty means every ublk device sysfs shows, when the step
	// starts or added while it waits, but another server's: a device
	// whose char device /dev/ublkcN (which the driver lets one process
	// open, its server) is open in a process that is neither the daemon
	// (nor one of its descendants) nor inside this server's cgroup
	// (another pod's ublk server, the host's) is left alone, and
	// Report.Note says so. So is a live device whose /dev/ublkcN no process
	// procfs shows has open, when the step knows the daemon's PID and read
	// its fds, and every process it could not read is outside the cgroup
	// (its server is another pod's, in a PID namespace this procfs does not
	// show); where the step cannot tell, the device is its own. A device
	// with no disk yet (added, not started: its server may not have
	// opened its /dev/ublkcN, and none can tell whose it is) is looked at
	// again every PollInterval and is the step's only once it has one;
	// the Report's Note names it.
	// Where the step does not know the daemon's PID (DaemonFuncs with no PidFunc, a
	// Socket without its Process), a process in the cgroup above this
	// server's (its pod's: a daemon in a container beside the server's)
	// counts as the daemon. A listed device not in sysfs when the step
	// starts (its daemon adds it a moment later) is read again every
	// PollInterval and is the step's once it is there: waited for,
	// stopped, and keeping the daemon from being killed while it is live;
	// one never there is VerdictAbsent, and the Report's Note names it.
	// IDs must be >= 0 and below 1<<20 (the driver's UBLK_MAX_UBLKS: no
	// device has a larger one), each listed once.
	Devices []int

	// Kernels are the operator's declarations of which kernels are fixed,
	// vulnerable or may hang on exit (from LoadKernelDeclarations, or a
	// KernelDeclarations flag). They are tried in order before the
	// built-in table; the first match decides. See KernelDeclaration for
	// the Ubuntu noble example.
	Kernels KernelDeclarations

	// Reserve is the time the step reserves before its deadline in the
	// drain plan; zero means 10 s. The phases before it leave it
	// this much. The step divides it 3:2:3:2 between the last resort
	// (killing the doomed holders and STOP_DEV of the devices they free),
	// the daemon's own stop, the /dev/ublk-control fallback and the kill,
	// in that order, with deadline.Split; the holder wait and the daemon's
	// stop also get whatever time the window has beyond the reserve. The
	// last resort's part is kept even when it does not run (it is then the
	// daemon's stop's), so the holder wait ends at the same point on every
	// kernel. It must be >= 0.
	//
	// It is taken once, at New, and Stop cannot tell a window shorter than
	// it because time ran short (a Force, which leaves the step its
	// reserve; a budget short for the reserves), where the stages need all
	// of it, from one where the plan reserved less: a step whose reserve in
	// the drain plan follows the grace in use (Budget.GraceInUse, a tenth of
	// it: 3 s after kubectl delete --grace-period=30 of a pod whose
	// manifest says an hour) must give Stop the same value, building the
	// Teardown when the step runs, or its stages keep the hour's 30 s in a
	// window of a few seconds and the holder wait gets none: the last
	// resort at once (docs/faults.md row 1055).
	Reserve time.Duration

	// HolderWait bounds how long the step waits for processes to close the
	// devices before it asks the daemon to stop. Zero means until the
	// last-resort point, where only the step's reserve is left (unbounded
	// without a deadline); a tiny value (1ns) looks once. It never extends
	// past the last-resort point; when it ends earlier with holders left,
	// the last resort (see NoLastResort) runs then. It must be >= 0.
	HolderWait time.Duration

	// RequestTimeout bounds Daemon.RequestStop; zero means 5 s. It never
	// runs past the point where the control fallback starts. It must be
	// >= 0.
	RequestTimeout time.Duration

	// ExitWait is how long the daemon may take to exit once none of its
	// devices is live any more, before it is killed (killing is then safe
	// on every kernel); zero means 5 s, a tiny value (1ns) kills at once.
	// It must be >= 0.
	ExitWait time.Duration

	// PollInterval is how often sysfs and procfs are re-read while
	// waiting; zero means 100 ms. It must be >= 0.
	PollInterval time.Duration

	// StopDespiteHolders makes the step ask the daemon to stop even when a
	// device is still held open after HolderWait (a holder then sees I/O
	// errors), instead of running the last resort. (A possible holder
	// never keeps a device from stopping past HolderWait: see Teardown.Stop.) By default the step
	// does not: on a kernel not known fixed it runs the last resort, and
	// where that is off, not applicable, or leaves a holder it may not
	// kill, it returns a *HeldError and leaves the daemon running.
	StopDespiteHolders bool

	// NoLastResort turns the last resort off. By default, on a kernel that
	// is not known fixed (vulnerable, exit may hang, an undeclared vendor
	// build), when a disk is still held open at the last-resort point (the
	// end of the holder wait, where only the step's reserve is left) the
	// step SIGKILLs the holders inside its own cgroup, which the pod's
	// SIGKILL would end a few seconds later anyway, stops every device
	// they free with STOP_DEV and asks the daemon to stop, so the daemon
	// exits with no live device before SIGKILL instead of dying with one
	// (the host-crash path); a device still held by what no kill releases
	// (a mount, swap, a holder outside the cgroup) is stopped under it
	// when the daemon dies with the pod, UBLK_F_USER_RECOVERY or not (see
	// Teardown.Stop). Turn it off only where a
	// holder in the server's cgroup must never be killed, for example a
	// VMM that runs its own shutdown past the grace period; the step then
	// returns a *HeldError and leaves the daemon running, and SIGKILL
	// kills it with live devices.
	NoLastResort bool

	// NoControl turns the /dev/ublk-control fallback off (and with it the
	// last resort's STOP_DEV): only the daemon stops the devices.
	NoControl bool

	// ControlPath is the control device of the fallback; "" means
	// "/dev/ublk-control". A command for a device added with
	// UBLK_F_UNPRIVILEGED_DEV names its char device in the same
	// directory (/dev/ublkcN), which the driver asks of such a device.
	ControlPath string

	// Logger receives the step's progress; nil discards it.
	Logger *slog.Logger

	// TracerProvider is the OpenTelemetry tracer provider; nil means
	// otel.GetTracerProvider(). Stop records one span, ublk.Teardown, with
	// the attributes drainkit.ublk.kernel.release, .kernel.class, .verdict
	// and .devices, and one event per action (drainkit.ublk.step.result,
	// .step.duration in seconds, .step.error); its status is Error when
	// Stop returns an error.
	TracerProvider trace.TracerProvider

	// MeterProvider is the OpenTelemetry meter provider; nil means
	// otel.GetMeterProvider(). Stop records drainkit.ublk.devices
	// ({device}), a counter of the devices by drainkit.ublk.verdict, and
	// drainkit.ublk.teardown.duration (s), a histogram by the step's
	// verdict with boundaries from 5 ms to 2 h.
	MeterProvider metric.MeterProvider

	// hooks are the test hooks, set through internal/ublkhook.
	hooks ublkhook.Hooks
}

func init() {
	ublkhook.Set = func(cfg any, h ublkhook.Hooks) { cfg.(*Config).hooks = h }
	ublkhook.Get = func(cfg any) ublkhook.Hooks { return cfg.(*Config).hooks }
}

// config is a checked Config with its defaults filled in.
type config struct {
	sysRoot, procRoot string
	ids               []int
	daemon            Daemon
	release           string // "" until New reads uname
	decls             []KernelDeclaration
	poll              time.Duration
	holderWait        time.Duration // 0: until the last-resort point
	requestTimeout    time.Duration
	stopDespite       bool
	exitWait          time.Duration
	lastResortReserve time.Duration // the four parts of Reserve
	stopReserve       time.Duration
	controlReserve    time.Duration
	killReserve       time.Duration
	lastResortOff     bool
	// killHolders is the holder half of the last resort; tests of this
	// package replace it (a fake procfs has no process to kill).
	killHolders func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[blockdev.DevNum]int, daemon int) (string, []HolderFate)
	// daemonDoomed says whether the daemon dies at the pod's SIGKILL
	// (stopUnderHolders); tests of this package replace it (a fake
	// daemon has no process).
	daemonDoomed   func(ctx context.Context, procRoot string, daemon int) (bool, string)
	openControl    func(ctx context.Context) (ublkctl.Controller, error) // nil: no control fallback
	beforeProcess  func(dir string)                                      // the holders scan's test hook
	beforeCharRead func(dir string)                                      // the whose pass's walk's test hook (a slow procfs)
	beforeSysfs    func(path string)                                     // called before each read of a device in sysfs (sysfs): this package's tests' slow sysfs
	beforeRequest  func()                                                // called as the daemon is asked to stop (internal/ublkstep)
	stopNote       func() string                                         // ends the Report's Note before it is logged (internal/ublkstep)
	logger         *slog.Logger
	tp             trace.TracerProvider
	mp             metric.MeterProvider
}

// fieldErr is New's error about one field of Config.
func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("ublk: Config.%s %s", field, fmt.Sprintf(format, args...))
}

// check validates c and fills in the defaults.
func (c Config) check() (config, error) {
	seen := make(map[int]bool, len(c.Devices))
	for _, id := range c.Devices {
		if id < 0 {
			return config{}, fieldErr("Devices", "must hold IDs >= 0, got %d", id)
		}
		if id >= ublkctl.MaxDevices {
			return config{}, fieldErr("Devices", "must hold IDs below %d (the ublk driver's UBLK_MAX_UBLKS: no device has a larger one), got %d", ublkctl.MaxDevices, id)
		}
		if seen[id] {
			return config{}, fieldErr("Devices", "must not repeat an ID, got %d twice", id)
		}
		seen[id] = true
	}
	for i, d := range c.Kernels {
		if err := d.validate(); err != nil {
			return config{}, fieldErr(fmt.Sprintf("Kernels[%d]", i), "is bad: %v", err)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Reserve", c.Reserve}, {"HolderWait", c.HolderWait}, {"RequestTimeout", c.RequestTimeout},
		{"ExitWait", c.ExitWait}, {"PollInterval", c.PollInterval}} {
		if f.d < 0 {
			return config{}, fieldErr(f.name, "must be >= 0, got %v", f.d)
		}
	}
	cfg := config{
		sysRoot:        or(c.hooks.SysfsRoot, "/sys"),
		procRoot:       or(c.hooks.ProcfsRoot, "/proc"),
		ids:            append([]int(nil), c.Devices...),
		release:        c.hooks.KernelRelease,
		decls:          append([]KernelDeclaration(nil), c.Kernels...),
		poll:           orDur(c.PollInterval, 100*time.Millisecond),
		holderWait:     c.HolderWait,
		requestTimeout: orDur(c.RequestTimeout, 5*time.Second),
		stopDespite:    c.StopDespiteHolders,
		exitWait:       orDur(c.ExitWait, 5*time.Second),
		lastResortOff:  c.NoLastResort,
		killHolders:    killDoomed,
		daemonDoomed:   daemonDoomed,
		beforeProcess:  c.hooks.BeforeProcess,
		beforeRequest:  c.hooks.BeforeRequestStop,
		stopNote:       c.hooks.StopNote,
		logger:         c.Logger,
		tp:             c.TracerProvider,
		mp:             c.MeterProvider,
	}
	reserve := orDur(c.Reserve, defaultReserve)
	cfg.lastResortReserve = reserve * 3 / 10
	cfg.stopReserve = reserve * 2 / 10
	cfg.controlReserve = reserve * 3 / 10
	cfg.killReserve = reserve - cfg.lastResortReserve - cfg.stopReserve - cfg.controlReserve
	switch path := or(c.ControlPath, ublkctl.DefaultPath); {
	case c.NoControl:
	case c.hooks.OpenControl != nil:
		cfg.openControl = c.hooks.OpenControl
	default:
		cfg.openControl = func(context.Context) (ublkctl.Controller, error) { return ublkctl.Open(path) }
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	return cfg, nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
