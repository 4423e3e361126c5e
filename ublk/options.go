package ublk

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Teardown. Options are checked by New, which names
// the offending field on error.
type Option func(*config) error

type config struct {
	sysRoot, procRoot string
	ids               []int
	daemon            Daemon
	release           string
	releaseSet        bool
	decls             []KernelDeclaration
	poll              time.Duration
	holderWait        time.Duration // -1: until the fallback's turn
	requestTimeout    time.Duration
	stopDespite       bool
	exitGrace         time.Duration
	lastResortReserve time.Duration // the four parts of WithReserve
	stopReserve       time.Duration
	controlReserve    time.Duration
	killReserve       time.Duration
	lastResortOff     bool
	// killHolders is the holder half of the last resort; tests of this
	// package replace it (a fake procfs has no process to kill).
	killHolders func(ctx context.Context, procRoot string, held map[int][]Holder, devs map[DevNum]int) (string, []HolderFate)
	openControl func(ctx context.Context) (Controller, error)
	logger      *slog.Logger
	tp          trace.TracerProvider
	mp          metric.MeterProvider
}

func defaults() config {
	return config{
		sysRoot:           "/sys",
		procRoot:          "/proc",
		poll:              100 * time.Millisecond,
		holderWait:        -1,
		requestTimeout:    5 * time.Second,
		exitGrace:         5 * time.Second,
		lastResortReserve: DefaultReserve * 3 / 10,
		stopReserve:       DefaultReserve * 2 / 10,
		controlReserve:    DefaultReserve * 3 / 10,
		killReserve:       DefaultReserve * 2 / 10,
		killHolders:       killDoomed,
		openControl:       func(context.Context) (Controller, error) { return OpenControl(DefaultControlPath) },
		logger:            slog.New(slog.DiscardHandler),
		tp:                otel.GetTracerProvider(),
		mp:                otel.GetMeterProvider(),
	}
}

func fieldErr(field, format string, args ...any) error {
	return fmt.Errorf("ublk: %s: %s", field, fmt.Sprintf(format, args...))
}

// WithSysfsRoot sets where sysfs is mounted (default "/sys"); tests point
// it at a fake tree.
func WithSysfsRoot(path string) Option {
	return func(c *config) error {
		if path == "" {
			return fieldErr("SysfsRoot", "empty path")
		}
		c.sysRoot = path
		return nil
	}
}

// WithProcfsRoot sets where procfs is mounted (default "/proc"), used for
// the holders scan.
func WithProcfsRoot(path string) Option {
	return func(c *config) error {
		if path == "" {
			return fieldErr("ProcfsRoot", "empty path")
		}
		c.procRoot = path
		return nil
	}
}

// WithDevices limits the step to these device IDs, as the server knows
// them, instead of every ublk device sysfs shows.
func WithDevices(ids ...int) Option {
	return func(c *config) error {
		for _, id := range ids {
			if id < 0 {
				return fieldErr("Devices", "negative device id %d", id)
			}
		}
		c.ids = append([]int(nil), ids...)
		return nil
	}
}

// WithDaemon sets the daemon to stop. Without one the step only waits for
// the devices to go (and uses the control fallback).
func WithDaemon(d Daemon) Option {
	return func(c *config) error {
		if d == nil {
			return fieldErr("Daemon", "nil")
		}
		c.daemon = d
		return nil
	}
}

// WithKernelRelease sets the kernel release to classify instead of the
// running kernel's (uname -r); tests use it to pretend a kernel.
func WithKernelRelease(release string) Option {
	return func(c *config) error {
		c.release, c.releaseSet = release, true
		return nil
	}
}

// WithFixedKernels declares releases (path.Match patterns over the whole
// uname -r) known to carry fixes f40139fde527 and dd24f87f65c9: a
// shorthand for WithKernelDeclarations with KernelFixed. See DecideKernel.
func WithFixedKernels(patterns ...string) Option {
	return func(c *config) error {
		for _, p := range patterns {
			d := KernelDeclaration{Pattern: p, Class: KernelFixed, Source: "WithFixedKernels"}
			if err := d.validate(); err != nil {
				return fieldErr("FixedKernels", "%v", err)
			}
			c.decls = append(c.decls, d)
		}
		return nil
	}
}

// WithKernelDeclarations adds the operator's declarations of which kernels
// are fixed, vulnerable or may hang on exit (from LoadKernelDeclarations or
// a KernelDeclarations flag). They are tried in the order given, after
// those of earlier options, before the built-in table; the first match
// decides. See KernelDeclaration for the Ubuntu noble example.
func WithKernelDeclarations(decls ...KernelDeclaration) Option {
	return func(c *config) error {
		for _, d := range decls {
			if err := d.validate(); err != nil {
				return fieldErr("KernelDeclarations", "%v", err)
			}
		}
		c.decls = append(c.decls, decls...)
		return nil
	}
}

// WithPollInterval sets how often sysfs and procfs are re-read while
// waiting (default 100 ms).
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fieldErr("PollInterval", "must be > 0, got %v", d)
		}
		c.poll = d
		return nil
	}
}

// WithHolderWait bounds how long the step waits for processes to close the
// devices before it asks the daemon to stop (default: until the last-resort
// point, where only the step's reserve is left; unbounded without a
// deadline; 0 looks once). It never extends past the last-resort point;
// when it ends earlier with holders left, the last resort (see
// WithoutLastResort) runs then.
func WithHolderWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fieldErr("HolderWait", "must be >= 0, got %v", d)
		}
		c.holderWait = d
		return nil
	}
}

// WithStopDespiteHolders makes the step ask the daemon to stop even when a
// device is still held open after HolderWait (the holder then sees I/O
// errors), instead of running the last resort. By default the step does
// not: on a kernel not known fixed it runs the last resort (see
// WithoutLastResort), and where that is off, not applicable, or leaves a
// holder it may not kill, it returns a *HeldError and leaves the daemon
// running.
func WithStopDespiteHolders() Option {
	return func(c *config) error { c.stopDespite = true; return nil }
}

// WithRequestTimeout bounds Daemon.RequestStop (default 5 s; never past
// the point where the control fallback starts).
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fieldErr("RequestTimeout", "must be > 0, got %v", d)
		}
		c.requestTimeout = d
		return nil
	}
}

// WithExitGrace sets how long the daemon may take to exit once none of its
// devices is live any more, before it is killed (default 5 s). Killing is
// then safe on every kernel.
func WithExitGrace(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fieldErr("ExitGrace", "must be >= 0, got %v", d)
		}
		c.exitGrace = d
		return nil
	}
}

// DefaultReserve is the time a Teardown keeps for itself by default: what
// the last resort, the daemon's own stop, the /dev/ublk-control fallback
// and the kill need.
const DefaultReserve = 10 * time.Second

// WithReserve sets the time the step reserves before its deadline in the
// drain plan (default DefaultReserve): the phases before it leave it this
// much. The step divides it 3:2:3:2 between the last resort (killing the
// doomed holders and STOP_DEV of the devices they free), the daemon's own
// stop, the /dev/ublk-control fallback and the kill, in that order, with
// deadline.Split; the holder wait and the daemon's stop also get whatever
// time the window has beyond the reserve. The last resort's part is kept
// even when it does not run (it is then the daemon's stop's), so the
// holder wait ends at the same point on every kernel. It must be positive.
func WithReserve(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fieldErr("Reserve", "must be > 0, got %v", d)
		}
		c.lastResortReserve = d * 3 / 10
		c.stopReserve = d * 2 / 10
		c.controlReserve = d * 3 / 10
		c.killReserve = d - c.lastResortReserve - c.stopReserve - c.controlReserve
		return nil
	}
}

// WithoutLastResort turns the last resort off. By default, on a kernel
// that is not known fixed (vulnerable, exit may hang, an undeclared vendor
// build), when a disk is still held open at the last-resort point (the
// end of the holder wait, where only the step's reserve is left) the step
// SIGKILLs the holders inside its own cgroup, which the pod's SIGKILL would
// end a few seconds later anyway, stops every device they free with
// STOP_DEV and asks the daemon to stop, so the daemon exits with no live
// device before SIGKILL instead of dying with one (the host-crash path).
// Turn it off only where a holder in the server's cgroup must never be
// killed, for example a VMM that runs its own shutdown past the grace
// period; the step then returns a *HeldError and leaves the daemon
// running, and SIGKILL kills it with live devices.
func WithoutLastResort() Option {
	return func(c *config) error { c.lastResortOff = true; return nil }
}

// WithControlPath sets the control device of the fallback (default
// DefaultControlPath).
func WithControlPath(path string) Option {
	return func(c *config) error {
		if path == "" {
			return fieldErr("ControlPath", "empty path")
		}
		c.openControl = func(context.Context) (Controller, error) { return OpenControl(path) }
		return nil
	}
}

// WithController supplies the fallback's Controller; open is called when
// the fallback is first needed, and the Controller is closed at the end of
// Run.
func WithController(open func(ctx context.Context) (Controller, error)) Option {
	return func(c *config) error {
		if open == nil {
			return fieldErr("Controller", "nil")
		}
		c.openControl = open
		return nil
	}
}

// WithoutControl disables the /dev/ublk-control fallback.
func WithoutControl() Option {
	return func(c *config) error { c.openControl = nil; return nil }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fieldErr("Logger", "nil")
		}
		c.logger = l
		return nil
	}
}

// WithTracerProvider sets the OpenTelemetry tracer provider (default
// otel.GetTracerProvider()). Stop records one span, ublk.Teardown, with
// the attributes drainkit.ublk.kernel.release, .kernel.class, .verdict and
// .devices, and one event per action (drainkit.ublk.step.result,
// .step.duration in seconds, .step.error); its status is Error when Stop
// returns an error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fieldErr("TracerProvider", "nil")
		}
		c.tp = tp
		return nil
	}
}

// WithMeterProvider sets the OpenTelemetry meter provider (default
// otel.GetMeterProvider()). Stop records drainkit.ublk.devices ({device}),
// a counter of the devices by drainkit.ublk.verdict, and
// drainkit.ublk.teardown.duration (s), a histogram by the step's verdict
// with boundaries from 5 ms to 2 h.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fieldErr("MeterProvider", "nil")
		}
		c.mp = mp
		return nil
	}
}
