package escalate

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"
)

// pollEvery bounds each blocking poll of a process, so Wait notices its
// context ending within this long.
const pollEvery = 50 * time.Millisecond

// A ProcessTarget is a Target over an *os.Process, which need not be a
// child of this one. On Linux it holds a pidfd, so a recycled PID is never
// signalled and the exit of any process can be awaited; elsewhere, or on
// kernels without pidfds (before 5.3), it signals the PID and polls it with
// signal 0. It does not reap: a child's exit is seen while it is a zombie,
// and the caller reaps it (p.Wait) afterwards. Close releases the pidfd.
type ProcessTarget struct {
	p    *os.Process
	mu   sync.Mutex
	fd   int  // pidfd, or -1
	gone bool // the process no longer existed when the target was made
}

// Process returns a Target over p. A process p.Wait already reaped counts
// as exited. The pidfd is opened by PID, so p must not have been reaped by
// anyone else, whose PID the kernel could have given to a new process.
func Process(p *os.Process) (*ProcessTarget, error) {
	if p == nil {
		return nil, errors.New("escalate: process must not be nil")
	}
	t := &ProcessTarget{p: p, fd: -1}
	// The os.Process handle knows when it was reaped; its PID may be reused
	// since, so it must not be opened again.
	if err := p.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
		t.gone = true
		return t, nil
	}
	fd, err := openPidfd(p.Pid)
	switch {
	case err == nil:
		t.fd = fd
	case errors.Is(err, syscall.ESRCH):
		t.gone = true
	case errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.ENOSYS):
		// no pidfds: signal the PID and poll it
	default:
		return nil, err
	}
	return t, nil
}

// Signal sends sig to the process.
func (t *ProcessTarget) Signal(_ context.Context, sig syscall.Signal) error {
	t.mu.Lock()
	fd, gone := t.fd, t.gone
	t.mu.Unlock()
	switch {
	case gone:
		return os.ErrProcessDone
	case fd >= 0:
		return pidfdSignal(fd, sig)
	}
	return t.p.Signal(sig)
}

// Wait returns nil once the process has exited (a zombie counts), or
// ctx.Err().
func (t *ProcessTarget) Wait(ctx context.Context) error {
	t.mu.Lock()
	fd, gone := t.fd, t.gone
	t.mu.Unlock()
	if gone {
		return nil
	}
	for {
		var exited bool
		var err error
		if fd >= 0 {
			exited, err = pidfdExited(fd, pollFor(ctx))
		} else {
			exited, err = signalZeroExited(t.p), nil
		}
		if exited || err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if fd < 0 && !sleepCtx(ctx, pollFor(ctx)) {
			return ctx.Err()
		}
	}
}

// Close releases the pidfd. The target must not be used afterwards.
func (t *ProcessTarget) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fd < 0 {
		return nil
	}
	err := closeFd(t.fd)
	t.fd, t.gone = -1, true
	return err
}

// pollFor returns how long one poll may block: pollEvery, or less when
// ctx's deadline is nearer.
func pollFor(ctx context.Context) time.Duration {
	d := pollEvery
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0)
}

// signalZeroExited probes the process with signal 0.
func signalZeroExited(p *os.Process) bool {
	err := p.Signal(syscall.Signal(0))
	return isGone(err)
}
