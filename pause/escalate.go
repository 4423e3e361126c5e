package pause

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// DefaultKillWait is how long Escalation waits after SIGKILL when KillWait
// is zero.
const DefaultKillWait = 5 * time.Second

// DefaultGrace is how long Escalation waits after the first signal when
// Grace is zero and the context has no deadline: the kubelet's default
// terminationGracePeriodSeconds.
const DefaultGrace = 30 * time.Second

// retryPause is the pause between two waits when a wait fails.
const retryPause = 100 * time.Millisecond

// An Exit is how a signalled target ended, as far as Escalation could
// observe.
type Exit string

// The exits Escalation tells apart.
const (
	// Exited: the target exited on the first signal within the grace, or
	// had exited before (it had the chance to save its state).
	Exited Exit = "exited"
	// ExitedAfterKill: the target needed SIGKILL.
	ExitedAfterKill Exit = "exited_after_kill"
	// ExitUnknown: not even SIGKILL was seen to end it within the kill
	// wait, or no wait could observe the end.
	ExitUnknown Exit = "unknown"
)

// A Target is something Escalation can signal and wait for: a process, a
// container, a sandbox.
type Target interface {
	// Signal sends sig. It returns an error matching os.ErrProcessDone or
	// syscall.ESRCH when the target has already exited.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Wait blocks until the target has exited, returning nil, or until ctx
	// is done, returning ctx.Err(). Another error means the wait failed and
	// says nothing about the target, except errors matching
	// os.ErrProcessDone, syscall.ESRCH or syscall.ECHILD (someone else
	// reaped it), which mean it has exited.
	Wait(ctx context.Context) error
}

// Escalation stops a target that saves its state on a signal (a gVisor
// actor on SIGTERM): it sends Signal, waits up to Grace for the target to
// exit, sends SIGKILL, and waits up to KillWait more. The zero value sends
// SIGTERM and waits until KillWait before the context's deadline.
type Escalation struct {
	// Signal is the first signal; zero means SIGTERM.
	Signal syscall.Signal
	// Grace is the longest wait after Signal. Zero means until KillWait
	// before ctx's deadline, or DefaultGrace without one. The grace always
	// ends KillWait before ctx's deadline at the latest.
	Grace time.Duration
	// KillWait is the longest wait after SIGKILL; zero means
	// DefaultKillWait.
	KillWait time.Duration
}

// Stop signals t, escalates to SIGKILL if it has not exited by the end of
// the grace, and reports how it ended. It returns by ctx's deadline, or
// after Grace + KillWait without one.
//
// A target that is already gone when signalled, or whose wait reports it
// reaped by someone else (ECHILD), counts as exited. A wait that fails any
// other way does not: it is retried until the grace ends and the target is
// then killed; this is the bug where a failed `runsc wait` looked like a
// clean exit and SIGKILL was never sent. The error is the last failure
// seen, and is nil unless the exit is ExitUnknown.
func (e Escalation) Stop(ctx context.Context, t Target) (Exit, error) {
	sig := e.Signal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	killWait := e.KillWait
	if killWait <= 0 {
		killWait = DefaultKillWait
	}
	graceEnd := e.graceEnd(ctx, killWait)

	var failures []error
	if err := t.Signal(ctx, sig); isGone(err) {
		return Exited, nil
	} else if err != nil {
		failures = append(failures, fmt.Errorf("pause: sending %v: %w", sig, err))
		graceEnd = time.Now() // it will not exit on a signal it did not get
	}
	exited, err := waitUntil(ctx, t, graceEnd)
	if exited {
		return Exited, nil
	}
	if err != nil {
		failures = append(failures, err)
	}
	if err := t.Signal(ctx, syscall.SIGKILL); isGone(err) {
		return Exited, nil // it exited on its own between the wait and the kill
	} else if err != nil {
		failures = append(failures, fmt.Errorf("pause: sending SIGKILL: %w", err))
	}
	killEnd := time.Now().Add(killWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(killEnd) {
		killEnd = dl
	}
	if exited, err = waitUntil(ctx, t, killEnd); exited {
		return ExitedAfterKill, nil
	}
	if err != nil {
		failures = append(failures, err)
	}
	return ExitUnknown, errors.Join(failures...)
}

func (e Escalation) graceEnd(ctx context.Context, killWait time.Duration) time.Time {
	now := time.Now()
	dl, hasDeadline := ctx.Deadline()
	var end time.Time
	switch {
	case e.Grace > 0:
		end = now.Add(e.Grace)
	case hasDeadline:
		end = dl
	default:
		end = now.Add(DefaultGrace)
	}
	if hasDeadline && end.After(dl.Add(-killWait)) {
		end = dl.Add(-killWait)
	}
	return end
}

// waitUntil waits for t to exit until the time until, retrying a wait
// that fails. It reports whether t exited, and the last wait failure.
func waitUntil(ctx context.Context, t Target, until time.Time) (bool, error) {
	var failed error
	for {
		wctx, cancel := context.WithDeadline(ctx, until)
		err := t.Wait(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		if err == nil || isGone(err) {
			return true, nil
		}
		if !timedOut { // the wait failed, not by running out of time
			failed = fmt.Errorf("pause: waiting for exit: %w", err)
		}
		left := time.Until(until)
		if left <= 0 || ctx.Err() != nil {
			return false, failed
		}
		if !sleepCtx(ctx, min(retryPause, left)) {
			return false, failed
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isGone reports whether err says the target has already exited.
func isGone(err error) bool {
	return err != nil && (errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH) ||
		errors.Is(err, syscall.ECHILD))
}

// Funcs returns a Target over two functions, for runtimes driven by
// commands such as `runsc kill <id> <signal>` and `runsc wait <id>`. The
// functions follow the contract of Target's methods: signal reports an
// already exited target with os.ErrProcessDone (or ESRCH), wait returns
// nil only once the target has exited.
func Funcs(signal func(ctx context.Context, sig syscall.Signal) error, wait func(ctx context.Context) error) Target {
	return funcTarget{signal, wait}
}

type funcTarget struct {
	signal func(context.Context, syscall.Signal) error
	wait   func(context.Context) error
}

func (f funcTarget) Signal(ctx context.Context, sig syscall.Signal) error { return f.signal(ctx, sig) }
func (f funcTarget) Wait(ctx context.Context) error                       { return f.wait(ctx) }

// Cmd returns a Target over a started child process. Its Wait calls
// c.Wait once, in a goroutine, so the child is reaped and its pipes
// closed; an exit with any status or signal counts as exited, and so does
// ECHILD (another reaper took the child first). The caller must not call
// c.Wait itself; c.ProcessState is set once Wait returned nil.
func Cmd(c *exec.Cmd) Target { return &cmdTarget{c: c} }

type cmdTarget struct {
	c    *exec.Cmd
	once sync.Once
	done chan struct{}
	err  error
}

func (t *cmdTarget) Signal(_ context.Context, sig syscall.Signal) error {
	if t.c.Process == nil {
		return errors.New("pause: command not started")
	}
	return t.c.Process.Signal(sig)
}

func (t *cmdTarget) Wait(ctx context.Context) error {
	if t.c.Process == nil {
		return errors.New("pause: command not started")
	}
	t.once.Do(func() {
		t.done = make(chan struct{})
		go func() {
			defer close(t.done)
			t.err = t.c.Wait()
		}()
	})
	select {
	case <-t.done: // checked first: an exit wins over a context that also ended
		return t.result()
	default:
	}
	select {
	case <-t.done:
		return t.result()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *cmdTarget) result() error {
	var exit *exec.ExitError
	if t.err == nil || errors.As(t.err, &exit) {
		return nil
	}
	return t.err
}

// A SignalSandbox is a Sandbox preserved by signalling: Preserve stops its
// Target with its Escalation. The target is expected to save its state on
// the first signal and exit (a gVisor actor on SIGTERM). Preserve returns
// nil when it exited within the grace, and a permanent error wrapping
// ErrKilled when it needed SIGKILL or ErrExitUnknown when its end could not
// be observed: signalling again cannot help.
type SignalSandbox struct {
	Name       string     // the sandbox's ID
	Target     Target     // what Preserve signals and waits for
	Escalation Escalation // how: the signal, the grace and the kill wait
}

// The errors of a SignalSandbox's Preserve.
var (
	ErrKilled      = errors.New("pause: target needed SIGKILL; its state may not be saved")
	ErrExitUnknown = errors.New("pause: target not seen to exit, even after SIGKILL")
)

// ID returns s.Name.
func (s *SignalSandbox) ID() string { return s.Name }

// Preserve stops the target; see SignalSandbox.
func (s *SignalSandbox) Preserve(ctx context.Context) error {
	exit, err := s.Escalation.Stop(ctx, s.Target)
	switch exit {
	case Exited:
		return nil
	case ExitedAfterKill:
		return backoff.Permanent(ErrKilled)
	}
	if err == nil {
		return backoff.Permanent(ErrExitUnknown)
	}
	return backoff.Permanent(fmt.Errorf("%w: %w", ErrExitUnknown, err))
}
