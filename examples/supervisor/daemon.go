//go:build linux

package main

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/internal/ublkstep"
	"github.com/drainkit/drainkit/ublk"
)

// EnvSysfsRoot, when set, is where the daemon step reads sysfs instead of
// /sys (tests point it at a fake tree). The /dev/ublk-control fallback is
// off then: its device IDs would not be the tree's.
const EnvSysfsRoot = "SUPERVISOR_SYSFS_ROOT"

// EnvProcfsRoot, with EnvSysfsRoot, is where the daemon step's holders scan
// reads procfs instead of /proc: tests whose fake devices no process can
// hold point it at an empty directory. A scan of the machine's /proc costs
// what runs there, and a process whose fds it cannot read (on some
// machines even root cannot read PID 1's) is a possible holder of every
// device (docs/faults.md row 184), which the step waits out to its last
// resort.
const EnvProcfsRoot = "SUPERVISOR_PROCFS_ROOT"

// newTeardown builds the daemon step: drainkit's ublk teardown. Against
// the daemon child (-daemon) it asks the daemon to stop with SIGTERM and
// sees its exit through the supervisor's reaper (a pidfd or wait of its own
// would race the reaper). Against the server's own daemon (-daemon-socket)
// it asks over the daemon's socket and sees the exit through a pidfd (see
// ownedDaemon). Either way it kills the daemon only when the kernel rule
// allows.
//
// Its reserve is the grace in use's (liveStepReserve), in the plan and in
// the stages the teardown lays out inside the step (ublkstep): built from
// -grace's, the teardown kept an hour's 30 s for its stages in the few
// seconds a 30 s deletion's plan gave the step, and gave up on the holders
// at once. The teardown after the server exited on its own begins with
// the reserve of the grace then (-grace's); ublkstep's Tighten follows a
// shorter one read later (followBudget tells it each move).
func (s *supervisor) newTeardown() (*ublkstep.Teardown, error) {
	cfg := ublk.Config{
		Kernels:       s.cfg.kernels,
		Logger:        s.log,
		MeterProvider: s.meters,
	}
	if root := os.Getenv(EnvSysfsRoot); root != "" { // the tests' fake devices
		cfg.NoControl = true
		ublkhook.Set(&cfg, ublkhook.Hooks{SysfsRoot: root, ProcfsRoot: os.Getenv(EnvProcfsRoot)})
	}
	return ublkstep.New(s.teardownDaemon(), cfg, s.liveStepReserve())
}

// teardownDaemon is the daemon as the daemon step sees it: the -daemon
// child, or the server's own daemon (-daemon-socket). Either comes with its
// PID (ublk.DaemonFuncs.PidFunc), which the step's guards need: not taken
// for another server's, not killed as a holder, the kill guard reading its
// /dev/ublkcN, and at the last resort known to die with the pod, so that a
// device held by kernel state is stopped under its holders before the
// daemon is asked to stop. The server's daemon was given as its own type,
// from which the step reads no PID: a daemon whose process is not known.
func (s *supervisor) teardownDaemon() ublk.Daemon {
	if s.owned != nil {
		return ublk.DaemonFuncs{StopFunc: s.owned.RequestStop, WaitFunc: s.owned.Wait, KillFunc: s.owned.Kill, PidFunc: s.owned.Pid}
	}
	return ublk.DaemonFuncs{
		StopFunc: func(context.Context) error { return s.daemon.signal(syscall.SIGTERM) },
		WaitFunc: func(ctx context.Context) error { return s.daemon.wait(ctx) }, // s.daemon is set at run
		KillFunc: func(context.Context) error { return s.daemon.signal(syscall.SIGKILL) },
		PidFunc:  func() int { return s.daemon.pid() }, // the kill guard reads its /dev/ublkcN
	}
}

// daemonStep is the daemon step (Run: stopDaemon) with the teardown's
// Tighten: when drain's budget moves SIGKILL earlier while it runs (a pod
// read with a shorter grace), or Force leaves it its reserve, drain tells
// the teardown the new deadline, and the teardown lays its control
// fallback and kill out again before it. A drain.NewStep alone has no
// Tighten: the teardown was only cancelled there, and ran neither.
type daemonStep struct {
	drain.Step
	td *ublkstep.Teardown
}

// Tighten is the teardown's (ublk.Teardown.Tighten of its Stop in progress).
func (d daemonStep) Tighten(dl time.Time) bool { return d.td.Tighten(dl) }

// stopDaemon is the daemon step: the ublk teardown, then the daemon's exit
// status. The teardown's report is the step's detail.
func (s *supervisor) stopDaemon(ctx context.Context) (*ublk.Report, error) {
	s.daemonStopping.Store(true) // its exit is asked for from now (daemonExited)
	rep, err := s.teardown.Stop(ctx)
	s.lastUblk.Store(rep)
	if err != nil {
		return rep, err
	}
	if s.daemon == nil {
		return rep, nil // the server's daemon: its exit status is its parent's to read
	}
	return rep, s.daemon.exitErr()
}

// serverPid returns the server's pid and whether it has not been reaped.
func (s *supervisor) serverPid() (int, bool) {
	if s.server == nil {
		return 0, false
	}
	select {
	case <-s.server.done:
		return s.server.pidNum, false
	default:
		return s.server.pidNum, true
	}
}
