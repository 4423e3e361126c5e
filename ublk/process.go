package ublk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/internal/proc"
)

// Process is a daemon known by its process ID: a child this process
// started, or any process it may signal. FindProcess pins the process with
// a pidfd, so a signal can never reach another process that reused the
// pid, and its exit is observed by polling the pidfd (no reaping: the
// parent keeps reaping its child as before).
//
// A Process not made by FindProcess (the zero value, or a nil *Process)
// pins no process: Signal, RequestStop, Kill and Wait return the error
// "ublk: Process not made by ublk.FindProcess" (Wait never reports an exit
// it did not see), Exited is false, Pid is 0 and Close does nothing.
type Process struct {
	p *proc.Process
}

// FindProcess opens a pidfd for pid (Linux 5.3+). It fails if there is no
// such process, or it has already been reaped; on systems other than
// Linux it always fails. It pins whatever process has pid when it is
// called: a pid read before (from /proc, a socket's peer credentials) names
// another process once its own has exited and been reaped, so a caller
// checks after the call that the process it read still runs (a pidfd of its
// own, such as SO_PEERPIDFD's, not exited), or reads it again.
func FindProcess(pid int) (*Process, error) {
	p, err := proc.Open(pid)
	if err != nil {
		return nil, fmt.Errorf("ublk: FindProcess: %w", err)
	}
	return &Process{p: p}, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int {
	if !p.made() {
		return 0
	}
	return p.p.Pid()
}

// errNotMade is the error of a Process not made by FindProcess.
var errNotMade = errors.New("ublk: Process not made by ublk.FindProcess")

// made reports whether p was made by FindProcess.
func (p *Process) made() bool { return p != nil && p.p != nil }

// RequestStop sends SIGTERM. A process that has already exited is not an
// error.
func (p *Process) RequestStop(ctx context.Context) error { return p.Signal(syscall.SIGTERM) }

// Kill sends SIGKILL. A process that has already exited is not an error.
func (p *Process) Kill(ctx context.Context) error { return p.Signal(syscall.SIGKILL) }

// Signal sends sig through the pidfd. A process that has already exited
// (a zombie, or reaped) is not an error: there is nothing left to signal.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.made() {
		return errNotMade
	}
	err := p.p.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ublk: %w", err)
	}
	return nil
}

// Wait returns nil once the process has exited (a zombie counts), or
// ctx.Err() when ctx ends first. It wakes at once on either.
func (p *Process) Wait(ctx context.Context) error {
	if !p.made() {
		return errNotMade
	}
	err := p.p.Wait(ctx)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("ublk: %w", err)
	}
	return err
}

// Exited reports whether the process has exited, without blocking.
func (p *Process) Exited() bool { return p.made() && p.p.Exited() }

// Close releases the pidfd. Calls still waiting finish first.
func (p *Process) Close() error {
	if !p.made() {
		return nil
	}
	return p.p.Close()
}
