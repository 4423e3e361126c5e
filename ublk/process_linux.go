//go:build linux

package ublk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a daemon known by its process ID: a child this process
// started, or any process it may signal. FindProcess pins the process with
// a pidfd, so a signal can never reach another process that reused the
// pid, and its exit is observed by polling the pidfd (no reaping: the
// parent keeps reaping its child as before).
type Process struct {
	pid    int
	mu     sync.RWMutex
	fd     int // -1 once closed
	closed bool
}

// FindProcess opens a pidfd for pid (Linux 5.3+). It fails if there is no
// such process, or it has already been reaped.
func FindProcess(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("ublk: pid %d: must be > 0", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("ublk: pidfd_open %d: %w", pid, err)
	}
	return &Process{pid: pid, fd: fd}, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// RequestStop sends SIGTERM. A process that has already exited is not an
// error.
func (p *Process) RequestStop(ctx context.Context) error { return p.Signal(unix.SIGTERM) }

// Kill sends SIGKILL. A process that has already exited is not an error.
func (p *Process) Kill(ctx context.Context) error { return p.Signal(unix.SIGKILL) }

// Signal sends sig through the pidfd.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errProcessClosed
	}
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // exited (zombie or reaped): nothing left to signal
	}
	if err != nil {
		return fmt.Errorf("ublk: signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

var errProcessClosed = errors.New("ublk: process handle closed")

// Wait returns nil once the process has exited (a zombie counts), or
// ctx.Err() when ctx ends first. It wakes at once on either.
func (p *Process) Wait(ctx context.Context) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return errProcessClosed
	}
	if exited, err := pollExit(p.fd, 0); exited || err != nil {
		return err
	}
	// A pipe whose write end is closed when ctx ends wakes the poll.
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("ublk: wait: %w", err)
	}
	defer unix.Close(pipe[0])
	var once sync.Once
	closeW := func() { once.Do(func() { unix.Close(pipe[1]) }) }
	defer closeW()
	stop := context.AfterFunc(ctx, closeW)
	defer stop()
	for {
		timeout := -1
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(0, int(time.Until(dl).Milliseconds())+1)
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("ublk: wait for pid %d: %w", p.pid, err)
		}
		if fds[0].Revents != 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Exited reports whether the process has exited, without blocking.
func (p *Process) Exited() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	exited, _ := pollExit(p.fd, 0)
	return exited
}

func pollExit(fd, timeoutMs int) (bool, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeoutMs)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("ublk: poll pidfd: %w", err)
		}
		return n > 0, nil
	}
}

// Close releases the pidfd. Calls still waiting finish first.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return unix.Close(p.fd)
}
