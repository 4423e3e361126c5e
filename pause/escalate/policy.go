package escalate

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

	"github.com/drainkit/drainkit/deadline"
)

// DefaultKillWait is how long Policy waits after SIGKILL when KillWait
// is zero.
const DefaultKillWait = 5 * time.Second

// DefaultTermWait is how long Policy waits after the first signal when
// TermWait is zero and the context has no deadline: the kubelet's default
// terminationGracePeriodSeconds.
const DefaultTermWait = 30 * time.Second

// retryPause is the pause between two waits when a wait fails.
const retryPause = 100 * time.Millisecond

// An Exit is how a signalled target ended, as far as Policy could
// observe.
type Exit string

// The exits Policy tells apart.
const (
	// Exited: the target exited on the first signal within the wait after the signal, or
	// had exited before (it had the chance to save its state).
	Exited Exit = "exited"
	// ExitedAfterKill: the target needed SIGKILL.
	ExitedAfterKill Exit = "exited_after_kill"
	// ExitUnknown: not even SIGKILL was seen to end it within the kill
	// wait, or no wait could observe the end.
	ExitUnknown Exit = "unknown"
)

// A Target is something Policy can signal and wait for: a process, a
// container, a sandbox.
type Target interface {
	// Signal sends sig. It returns an error matching os.ErrProcessDone or
	// syscall.ESRCH when the target has already exited.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Wait blocks until the target has exited, returning nil, or until ctx
	// is done, returning ctx.Err(). Another error means the wait failed and
	// says nothing about the target, except errors matching
	// os.ErrProcessDone or syscall.ESRCH, which mean it has exited. An
	// error matching syscall.ECHILD says someone else reaped the waiting
	// child (a `runsc wait` collected by a PID-1 reaper, tini, a
	// subreaper): nothing about the target itself. Policy then asks
	// the target's Prober, if it has one.
	Wait(ctx context.Context) error
}

// A Prober is a Target that can say at once, without waiting, whether it
// has exited: the runtime's view (`runsc state`), or a pidfd of the
// container's init. Policy asks it when a wait was stolen (ECHILD).
type Prober interface {
	// Exited reports whether the target has exited. An error means the
	// answer is unknown.
	Exited(ctx context.Context) (bool, error)
}

// Policy stops a target that saves its state on a signal (a gVisor
// actor on SIGTERM): it sends Signal, waits up to TermWait for the target to
// exit, sends SIGKILL, and waits up to KillWait more. The zero value sends
// SIGTERM and waits until KillWait before the context's deadline.
type Policy struct {
	// Signal is the first signal; zero means SIGTERM.
	Signal syscall.Signal
	// TermWait is the longest wait after Signal. Zero means until KillWait
	// before ctx's deadline (half of a window shorter than 2 x KillWait),
	// or DefaultTermWait without one. The wait always ends KillWait
	// before ctx's deadline at the latest.
	TermWait time.Duration
	// KillWait is the longest wait after SIGKILL; zero means
	// DefaultKillWait.
	KillWait time.Duration
}

// Stop signals t, escalates to SIGKILL if it has not exited by the end of
// the wait after the signal, and reports how it ended. It returns by ctx's deadline, or
// after TermWait + KillWait without one.
//
// A target that is already gone when signalled counts as exited. A wait
// that fails does not: it is retried until the wait after the signal ends and the target
// is then killed; this is the bug where a failed `runsc wait` looked like a
// clean exit and SIGKILL was never sent. Neither does a wait that fails
// with ECHILD, which only says that someone else reaped the waiting child
// (a child reaper collected the `runsc wait` first): Stop then asks the
// target's Prober every 100 ms instead of waiting, and a target without
// one, or whose Prober cannot tell, is treated as still running, so it
// gets SIGKILL when the wait after the signal ends. A Signal error matching ECHILD (the
// signalling command's status was stolen the same way) may have been
// delivered: the wait after the signal is kept. The error is the last failure seen, and is
// nil unless the exit is ExitUnknown.
func (e Policy) Stop(ctx context.Context, t Target) (Exit, error) {
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
		failures = append(failures, fmt.Errorf("escalate: sending %v: %w", sig, err))
		if !errors.Is(err, syscall.ECHILD) { // ECHILD: sent, but its status was stolen
			graceEnd = time.Now() // it will not exit on a signal it did not get
		}
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
		failures = append(failures, fmt.Errorf("escalate: sending SIGKILL: %w", err))
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

// graceEnd is when the wait after SIGTERM ends: TermWait after now (by
// default the rest of ctx's window, or DefaultTermWait without a deadline),
// but never into the killWait the SIGKILL and its wait need before ctx's
// deadline, laid out by the plan's rule (deadline.Split). Both waits
// reserve killWait, so a window shorter than twice that is shared equally:
// a target that would save itself on the signal still gets its chance.
func (e Policy) graceEnd(ctx context.Context, killWait time.Duration) time.Time {
	now := time.Now()
	dl, ok := ctx.Deadline()
	if !ok {
		grace := e.TermWait
		if grace <= 0 {
			grace = DefaultTermWait
		}
		return now.Add(grace)
	}
	ws := deadline.Split(now, dl,
		deadline.Phase{Name: "term", Reserve: deadline.Fixed(killWait), Critical: true, Max: max(e.TermWait, 0)},
		deadline.Phase{Name: "kill", Reserve: deadline.Fixed(killWait), Critical: true})
	return ws[0].Deadline
}

// waitUntil waits for t to exit until the time until, retrying a wait
// that fails. Once a wait was stolen (ECHILD) it asks t's Prober instead.
// It reports whether t exited, and the last failure.
func waitUntil(ctx context.Context, t Target, until time.Time) (bool, error) {
	var failed error
	stolen := false
	for {
		wctx, cancel := context.WithDeadline(ctx, until)
		var err error
		if stolen {
			err = probe(wctx, t)
		} else {
			err = t.Wait(wctx)
		}
		timedOut := wctx.Err() != nil
		cancel()
		if err == nil || isGone(err) {
			return true, nil
		}
		if errors.Is(err, syscall.ECHILD) {
			stolen = true
		}
		if !timedOut && !errors.Is(err, errRunning) { // the wait failed, not by running out of time
			failed = fmt.Errorf("escalate: waiting for exit: %w", err)
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

// errRunning is probe's answer when the Prober says the target still runs.
var errRunning = errors.New("escalate: target still running")

// errNoProber is probe's answer for a target that cannot be asked.
var errNoProber = fmt.Errorf("escalate: the wait was stolen (%w) and the target has no Prober: exit unknown", syscall.ECHILD)

// probe asks t's Prober once: nil if it exited, errRunning if not, another
// error if unknown.
func probe(ctx context.Context, t Target) error {
	p, ok := t.(Prober)
	if !ok {
		return errNoProber
	}
	exited, err := p.Exited(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("escalate: asking whether the target exited: %w", err)
	case exited:
		return nil
	}
	return errRunning
}

// isGone reports whether err says the target has already exited.
func isGone(err error) bool {
	return err != nil && (errors.Is(err, os.ErrProcessDone) || errors.Is(err, syscall.ESRCH))
}

// Funcs returns a Target over two functions, for runtimes driven by
// commands such as `runsc kill <id> <signal>` and `runsc wait <id>`. The
// functions follow the contract of Target's methods: signal reports an
// already exited target with os.ErrProcessDone (or ESRCH), wait returns
// nil only once the target has exited. The Target has no Prober: give one
// with ProbedFuncs where the runtime can be asked.
func Funcs(signal func(ctx context.Context, sig syscall.Signal) error, wait func(ctx context.Context) error) Target {
	return funcTarget{signal, wait}
}

// ProbedFuncs is Funcs with a Prober: exited answers, without waiting,
// whether the target has exited (for example from `runsc state`: stopped or
// no such container), or an error when it cannot tell.
func ProbedFuncs(signal func(ctx context.Context, sig syscall.Signal) error, wait func(ctx context.Context) error,
	exited func(ctx context.Context) (bool, error)) Target {
	return probedTarget{funcTarget{signal, wait}, exited}
}

type funcTarget struct {
	signal func(context.Context, syscall.Signal) error
	wait   func(context.Context) error
}

func (f funcTarget) Signal(ctx context.Context, sig syscall.Signal) error { return f.signal(ctx, sig) }
func (f funcTarget) Wait(ctx context.Context) error                       { return f.wait(ctx) }

type probedTarget struct {
	funcTarget
	exited func(context.Context) (bool, error)
}

func (p probedTarget) Exited(ctx context.Context) (bool, error) { return p.exited(ctx) }

// Cmd returns a Target over a started child process. Its Wait calls
// c.Wait once, in a goroutine, so the child is reaped and its pipes
// closed; an exit with any status or signal counts as exited. When
// another reaper took the child first, Wait fails with ECHILD and the
// Target's Prober answers instead: c.Process.Signal(0), which on Linux goes
// through the pidfd Go holds for the child, so a recycled PID is never
// mistaken for it. The caller must not call c.Wait itself;
// c.ProcessState is set once Wait returned nil after a real exit.
func Cmd(c *exec.Cmd) Target { return &cmdTarget{c: c} }

type cmdTarget struct {
	c    *exec.Cmd
	once sync.Once
	done chan struct{}
	err  error
}

func (t *cmdTarget) Signal(_ context.Context, sig syscall.Signal) error {
	if t.c.Process == nil {
		return errors.New("escalate: command not started")
	}
	return t.c.Process.Signal(sig)
}

func (t *cmdTarget) Wait(ctx context.Context) error {
	if t.c.Process == nil {
		return errors.New("escalate: command not started")
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

// Exited asks the process with signal 0: gone means exited.
func (t *cmdTarget) Exited(context.Context) (bool, error) {
	if t.c.Process == nil {
		return false, errors.New("escalate: command not started")
	}
	err := t.c.Process.Signal(syscall.Signal(0))
	switch {
	case err == nil:
		return false, nil
	case isGone(err):
		return true, nil
	}
	return false, err
}

func (t *cmdTarget) result() error {
	var exit *exec.ExitError
	if t.err == nil || errors.As(t.err, &exit) {
		return nil
	}
	return t.err
}

// A Sandbox is a pause.Sandbox preserved by signalling: Preserve stops its
// Target with its Policy. The target is expected to save its state on
// the first signal and exit (a gVisor actor on SIGTERM). Preserve returns
// nil when it exited within the wait after the signal, and a permanent error wrapping
// ErrKilled when it needed SIGKILL or ErrExitUnknown when its end could not
// be observed: signalling again cannot help.
type Sandbox struct {
	Name   string // the sandbox's ID
	Target Target // what Preserve signals and waits for
	Policy Policy // how: the signal, the wait after the signal and the kill wait
}

// The errors of a Sandbox's Preserve.
var (
	ErrKilled      = errors.New("escalate: target needed SIGKILL; its state may not be saved")
	ErrExitUnknown = errors.New("escalate: target not seen to exit, even after SIGKILL")
)

// ID returns s.Name.
func (s *Sandbox) ID() string { return s.Name }

// Preserve stops the target; see Sandbox.
func (s *Sandbox) Preserve(ctx context.Context) error {
	exit, err := s.Policy.Stop(ctx, s.Target)
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
