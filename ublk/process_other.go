//go:build !linux

package ublk

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Process is a daemon known by its process ID. Only Linux is supported;
// elsewhere FindProcess fails.
type Process struct{ pid int }

// FindProcess fails: ublk exists only on Linux.
func FindProcess(pid int) (*Process, error) {
	return nil, fmt.Errorf("ublk: FindProcess(%d): %w", pid, errUnsupported)
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// RequestStop is not supported on this system.
func (p *Process) RequestStop(context.Context) error { return errUnsupported }

// Kill is not supported on this system.
func (p *Process) Kill(context.Context) error { return errUnsupported }

// Signal is not supported on this system.
func (p *Process) Signal(syscall.Signal) error { return errUnsupported }

// Wait is not supported on this system.
func (p *Process) Wait(context.Context) error { return errUnsupported }

// Exited reports false on this system.
func (p *Process) Exited() bool { return false }

// Close does nothing on this system.
func (p *Process) Close() error { return nil }

var errUnsupported = fmt.Errorf("ublk: not supported on this system: %w", errors.ErrUnsupported)
