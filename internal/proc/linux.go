//go:build linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a process pinned by a pidfd. Its methods may be called from
// several goroutines; Close waits for the calls in progress.
type Process struct {
	pid int
	h   *handle
}

// handle holds the pidfd; a cleanup closes it if the Process is dropped
// without Close.
type handle struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

func (h *handle) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return unix.Close(h.fd)
}

// Open pins the process pid with a pidfd. It fails if there is no such
// process or it has already been reaped (an error wrapping
// os.ErrProcessDone), or if the kernel has no pidfds.
func Open(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, errPID(pid)
	}
	fd, err := unix.PidfdOpen(pid, 0) // close-on-exec by default
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("pidfd_open %d: %w (%w)", pid, os.ErrProcessDone, err)
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	p := &Process{pid: pid, h: &handle{fd: fd}}
	runtime.AddCleanup(p, func(h *handle) { _ = h.close() }, p.h)
	return p, nil
}

// Dup pins op's process with a duplicate of the pidfd os.StartProcess got
// when it made the process (clone with CLONE_PIDFD), not by its PID: unlike
// Open, it cannot pin another process that reused the PID after the child
// was reaped behind op's back (a wait4(-1) reaper). It fails with an error
// wrapping os.ErrNoHandle when op has no pidfd (the kernel has none, or op
// came from os.FindProcess without one), with one wrapping os.ErrProcessDone
// once op.Wait has returned, and with another once op.Release was called.
func Dup(op *os.Process) (*Process, error) {
	fd, derr := -1, error(nil)
	err := op.WithHandle(func(h uintptr) { fd, derr = unix.FcntlInt(h, unix.F_DUPFD_CLOEXEC, 0) })
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", op.Pid, err)
	}
	p := &Process{pid: op.Pid, h: &handle{fd: fd}}
	runtime.AddCleanup(p, func(h *handle) { _ = h.close() }, p.h)
	return p, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// Signal sends sig through the pidfd. A process that has exited (zombie
// or reaped) returns an error wrapping os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return ErrClosed
	}
	err := unix.PidfdSendSignal(p.h.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, os.ErrProcessDone)
	}
	if err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// Exited reports whether the process has exited (a zombie counts),
// without blocking. It reports false after Close.
func (p *Process) Exited() bool {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return false
	}
	exited, _ := pollExit(p.h.fd, 0)
	return exited
}

// Wait returns nil once the process has exited (a zombie counts), or
// ctx.Err() when ctx ends first. It wakes at once on either, and never
// reaps the process.
func (p *Process) Wait(ctx context.Context) error {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return ErrClosed
	}
	if exited, err := pollExit(p.h.fd, 0); exited || err != nil {
		return err
	}
	// A pipe whose write end is closed when ctx ends wakes the poll.
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("wait for pid %d: %w", p.pid, err)
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
		fds := []unix.PollFd{{Fd: int32(p.h.fd), Events: unix.POLLIN}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for pid %d: %w", p.pid, err)
		}
		if fds[0].Revents != 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func pollExit(fd, timeoutMs int) (bool, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeoutMs)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		return n > 0, nil
	}
}

// Close releases the pidfd; calls in progress finish first. Closing twice
// is not an error.
func (p *Process) Close() error { return p.h.close() }
