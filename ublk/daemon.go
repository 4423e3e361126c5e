package ublk

import (
	"context"
	"errors"
)

// Daemon is the ublk server process whose devices the step tears down.
// Implementations: *Process (a child or any process found by pid: SIGTERM,
// exit seen through a pidfd), *Socket (AgentENV's length-prefixed JSON
// request, optionally paired with a *Process to wait and kill) and
// DaemonFuncs (anything else, such as queues served in this process).
type Daemon interface {
	// RequestStop asks the daemon to stop its devices and exit. It returns
	// once the request is delivered, not when the daemon has exited, and
	// by ctx's deadline.
	RequestStop(ctx context.Context) error
	// Wait returns nil once the daemon has exited, or ctx.Err() when ctx
	// ends first. Given a ctx already ended it should still look once:
	// the step looks so at a daemon it never asked to stop, and reports
	// one whose exit it did not see left running. Any other error means
	// the exit cannot be watched: the step waits on without it (a daemon
	// with a live device is not killed for that) and says so in
	// Report.Note and its error's cause.
	Wait(ctx context.Context) error
	// Kill ends the daemon at once (SIGKILL) without waiting for it. The
	// step calls it only when the kernel rule allows; implementations that
	// cannot kill return ErrCannotKill.
	Kill(ctx context.Context) error
}

// ErrUnconfirmed is wrapped by the error of a Daemon.RequestStop whose
// request was sent but not answered in time, the daemon still running. A
// daemon already stopping may never read it: AgentENV's uvm-ublk-daemon,
// asked first by its own server at SIGTERM (or stopping at its own SIGTERM,
// or at its parent's exit), leaves its accept loop and keeps its socket
// bound, unread, while it stops its devices one at a time. The step takes
// such a request as delivered: it does not fall back to the control
// device at once (STOP_DEV under a daemon stopping its devices in order),
// and a daemon that is in fact hung is covered by the planned fallback,
// near the deadline, and the kill rule. Report.Daemon.Unconfirmed says so.
// A step with no deadline has no planned fallback: there it is a failed
// request, and the fallback follows at once.
var ErrUnconfirmed = errors.New("ublk: stop request sent, not answered")

// ErrCannotKill is returned by Daemon.Kill for daemons this process cannot
// kill (a socket without a process, queues served in-process).
var ErrCannotKill = errors.New("ublk: daemon cannot be killed from here")

// DaemonFuncs adapts functions to Daemon. A nil StopFunc is a no-op (the
// daemon is stopped by other means), a nil WaitFunc reports the daemon
// exited at once, a nil KillFunc returns ErrCannotKill.
//
// PidFunc, when set, returns the daemon's process ID, or 0 once it has
// exited (its PID may be another process's then) or when it is not known.
// The step uses it as it uses a *Process's: the daemon's processes are not
// taken for another server's nor killed as holders, and before a kill on
// a kernel where killing with a live device is unsafe the step reads that
// process's open /dev/ublkcN for a disk it still serves. A nil PidFunc is
// a daemon whose PID is not known: those guards fall back to the cgroup
// rule of Config.Devices, and the kill guard, with no fds to read, takes
// every live disk in sysfs that is not the step's nor known to be another
// server's for one the daemon may serve: it is not killed while one is.
type DaemonFuncs struct {
	StopFunc func(ctx context.Context) error
	WaitFunc func(ctx context.Context) error
	KillFunc func(ctx context.Context) error
	PidFunc  func() int
}

// Pid calls PidFunc; 0 when it is nil.
func (d DaemonFuncs) Pid() int {
	if d.PidFunc == nil {
		return 0
	}
	return d.PidFunc()
}

// RequestStop calls StopFunc.
func (d DaemonFuncs) RequestStop(ctx context.Context) error {
	if d.StopFunc == nil {
		return nil
	}
	return d.StopFunc(ctx)
}

// Wait calls WaitFunc.
func (d DaemonFuncs) Wait(ctx context.Context) error {
	if d.WaitFunc == nil {
		return nil
	}
	return d.WaitFunc(ctx)
}

// Kill calls KillFunc.
func (d DaemonFuncs) Kill(ctx context.Context) error {
	if d.KillFunc == nil {
		return ErrCannotKill
	}
	return d.KillFunc(ctx)
}
