//go:build !linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

var errUnsupported = fmt.Errorf("pidfd: not supported on this system: %w", errors.ErrUnsupported)

// Process is a process pinned by a pidfd; it exists only on Linux.
type Process struct{ pid int }

// Open fails: pidfds exist only on Linux.
func Open(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, errPID(pid)
	}
	return nil, errUnsupported
}

// Dup fails: pidfds exist only on Linux.
func Dup(*os.Process) (*Process, error) { return nil, errUnsupported }

// Adopt fails: pidfds exist only on Linux.
func Adopt(int) (*Process, error) { return nil, errUnsupported }

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// Signal is not supported on this system.
func (p *Process) Signal(syscall.Signal) error { return errUnsupported }

// Exited reports false on this system.
func (p *Process) Exited() bool { return false }

// Wait is not supported on this system.
func (p *Process) Wait(context.Context) error { return errUnsupported }

// Close does nothing on this system.
func (p *Process) Close() error { return nil }

// Discards is not supported on this system.
func (p *Process) Discards(syscall.Signal) (bool, error) { return false, errUnsupported }
