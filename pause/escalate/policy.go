package escalate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/pause"
)

// defaultKillWait is how long Policy waits after SIGKILL when KillWait
// is zero.
const defaultKillWait = 5 * time.Second

// defaultTermWait is how long Policy waits after the first signal when
// TermWait is zero and the context has no deadline: the kubelet's default
// terminationGracePeriodSeconds.
const defaultTermWait = 30 * time.Second

// retryPause is the pause between two waits when a wait fails.
const retryPause = 100 * time.Millisecond

// An Exit is how a signalled target ended, as far as Policy could
// observe.
type Exit string

// The exits Policy tells apart.
const (
	// Exited: the target exited on the first signal within the wait after
	// the signal (it had the chance to save its state).
	Exited Exit = "exited"
	// Gone: the target exited without getting the first signal: it had
	// already exited when the signal was sent (Signal said so:
	// os.ErrProcessDone or ESRCH), or the signal failed to go out and the
	// target was then seen to have exited before SIGKILL. It never got
	// the signal, so whether it saved its state is not known.
	Gone Exit = "gone"
	// ExitedAfterKill: the target needed SIGKILL.
	ExitedAfterKill Exit = "exited_after_kill"
	// ExitUnknown: its end was not seen. SIGKILL went out and no wait saw
	// the end within the kill wait; or SIGKILL went out as Stop's context
	// ended, and its effect was not waited for; or SIGKILL could not be
	// sent. The error says which.
	ExitUnknown Exit = "unknown"
)

// A Target is something Policy can signal, wait for, and ask whether it
// has exited: a process, a container, a sandbox. Cmd and Funcs make one.
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
	// Exited instead.
	Wait(ctx context.Context) error
	// Exited reports at once, without waiting, whether the target has
	// exited: the runtime's view (`runsc state`), or a pidfd of the
	// container's init. Policy asks it when a wait was stolen (ECHILD).
	// An error means the answer is unknown; a target that cannot be asked
	// returns an error wrapping errors.ErrUnsupported.
	Exited(ctx context.Context) (bool, error)
}

// Policy stops a target that saves its state on a signal (a gVisor
// actor on SIGTERM): it sends Signal, then SIGCONT, waits up to TermWait for
// the target to exit, sends SIGKILL, and waits up to KillWait more. The
// zero value sends SIGTERM and waits until KillWait before the context's
// deadline (half of a window shorter than 2 x KillWait). The SIGCONT, sent
// once after a Signal that went out (but SIGKILL or SIGCONT), as systemd
// sends one after every kill signal, continues a target stopped by SIGSTOP
// (a debugger, a job-control stop), which keeps a signal it handles pending
// and, before, was SIGKILLed at the end of TermWait, its state unsaved; a
// running target ignores it. It does not thaw a frozen cgroup. Where no signal
// stops a process (Windows), no SIGCONT is sent.
type Policy struct {
	// Signal is the first signal; zero means SIGTERM. SIGKILL gives the
	// target no chance to save its state: an exit on it is
	// ExitedAfterKill, with an error saying so, never Exited. One that is no
	// signal (negative, above 64) is not sent: SIGKILL goes out at once, and
	// the error names the field (with syscall.EINVAL).
	Signal syscall.Signal
	// TermWait is the longest wait after Signal. Zero (or negative) means
	// until KillWait before ctx's deadline (half of a window shorter than
	// 2 x KillWait), or 30 s (the kubelet's default grace period) without
	// one. Whatever TermWait, the wait ends at the latest KillWait before
	// ctx's deadline, so that SIGKILL and its wait fit, or, in a window
	// shorter than 2 x KillWait, which the two waits share, halfway
	// through it: the kill wait then gets the other half, less than
	// KillWait. ctx's deadline is the one its Deadline reports as the wait
	// runs: one that moves earlier moves the wait's end (see Stop). A
	// Sandbox's zero TermWait is 30 s, with a deadline too, the window
	// still ending it earlier (see Sandbox): its wait holds one of a
	// Preserver's slots.
	TermWait time.Duration
	// KillWait is the longest wait after SIGKILL; zero (or negative) means
	// 5 s.
	KillWait time.Duration
}

// Stop signals t, escalates to SIGKILL if it has not exited by the end of
// the wait after the signal, and reports how it ended. It returns by ctx's deadline, or
// after TermWait + KillWait without one, but for two sends, each given at least a second
// (killSendWait): the first signal's, which ctx's deadline still ends (without one, Stop
// can return up to a second after TermWait + KillWait), and the SIGKILL's, which ctx's
// end does not cut: it is given the kill wait as planned, and Stop can return up to a
// second after ctx's end.
//
// The wait after the signal follows ctx's Deadline as it moves earlier: a drain's budget
// that moves SIGKILL earlier (a deletion with a shorter grace, read during the wait) moves
// the Deadline its steps' and Preserves' contexts report (pause.Preserver.Tighten), and
// ends them there. The wait's end is laid out again, from the wait's start, for the new
// deadline, so that SIGKILL and its wait fit before it; Stop reads the Deadline again
// whenever a wait is retried and, while one blocks, when it moves: the Deadline of a
// Preserver's context and of a drain step's says so, and a SIGKILL due at once goes out
// at the move. A context that does not say when its Deadline moves has it read every
// tenth of KillWait (at least 10 ms, at most a second), a move followed up to that late.
// Laid out once,
// the wait ran on to the context's end and the SIGKILL's effect was not waited for: a
// target that was killed ended ExitUnknown.
//
// A ctx that ends before the wait after the signal does (cancelled: a drain ends a
// step's context at the new deadline of a budget that moved SIGKILL earlier) ends that
// wait, and SIGKILL is sent at once, under a context of its own: the SIGKILL enforces ctx's end,
// and a runtime driven by commands bound to their context (`runsc kill`) refused a
// SIGKILL sent under it, leaving the target running. Its effect is not waited for: the
// end is ExitUnknown, unless the wait, asked once, already sees the exit. The first
// signal's send, under ctx, ends with the wait after the signal (or a second after it
// began, if that is later): a send that hung (a `runsc kill` whose sandbox never
// answered) held Stop to ctx's deadline, and the SIGKILL went out with no kill wait left.
//
// SIGCONT follows the first signal once it went out (unless Signal is SIGKILL or SIGCONT),
// sent once, its send bounded as the first signal's: a target stopped by SIGSTOP holds a
// signal it handles pending until continued. One that found the target gone, or whose
// status was stolen (ECHILD), counts as sent; one that failed is said in the error of an
// ExitedAfterKill, as why the target may not have acted on the signal, and joined to an
// ExitUnknown's.
//
// A target that is already gone when first signalled is Gone, and so is
// one whose first signal failed to go out and that is then seen to have
// exited before SIGKILL: it never got the signal, so it is never Exited. A wait
// that fails does not: it is retried until the wait after the signal ends and the target
// is then killed; this is the bug where a failed `runsc wait` looked like a
// clean exit and SIGKILL was never sent. Neither does a wait that fails
// with ECHILD, which only says that someone else reaped the waiting child
// (a child reaper collected the `runsc wait` first): Stop then asks the
// target's Prober every 100 ms instead of waiting, and a target without
// one, or whose Prober cannot tell, is treated as still running, so it
// gets SIGKILL when the wait after the signal ends. A first signal that
// fails to go out is sent again every 100 ms until the wait after the
// signal ends, unless the failure is for good (EPERM, EINVAL,
// errors.ErrUnsupported, or a signal Cmd's child never gets: the init of
// its PID namespace, with no handler for it, whose signals the kernel
// discards): before, a target that never got it was SIGKILLed
// at once. A Signal error matching ECHILD (the
// signalling command's status was stolen the same way) may have been
// delivered: the wait after the signal is kept. A SIGKILL that fails for a
// passing reason is sent again every 100 ms until the kill wait ends:
// sent once, a `runsc kill --all` that could not fork left the target
// running, ExitUnknown; a target such a resend finds gone is
// ExitedAfterKill (the failed send may have reached it). The error is nil for Exited and
// Gone. For ExitedAfterKill it says why the target was not given the first
// signal, when it was not (the send failed, or Signal is SIGKILL; one whose
// status was stolen, ECHILD, counts as sent), or that its SIGCONT failed, and is nil
// when the target only did not exit within the wait after the signal. For
// ExitUnknown it is never nil: it wraps ErrExitUnknown, says whether SIGKILL went out
// (and how long it was waited for), went out as ctx ended, or could not be sent, and
// is joined with every failure seen on the way. A nil t (or a nil pointer in it) is
// not signalled: Stop returns ExitUnknown and an error saying so.
func (e Policy) Stop(ctx context.Context, t Target) (Exit, error) {
	var killAt time.Time
	return e.stop(ctx, t, &killAt)
}

// stop is Stop, which sets *killAt to when it sent SIGKILL at the end of the wait
// after the signal, if it did.
func (e Policy) stop(ctx context.Context, t Target, killAt *time.Time) (Exit, error) {
	if isNil(t) {
		return ExitUnknown, errNoTarget
	}
	sig := e.Signal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	killWait := e.KillWait
	if killWait <= 0 {
		killWait = defaultKillWait
	}
	termEnd := e.termEnd(ctx, killWait)

	var failures []error
	// ended is how a target that exits before SIGKILL ended: Exited when
	// it got the signal, Gone when the signal never went out (it exited on
	// its own, nothing saved its state on a signal).
	ended := Exited
	var unsent error // why the target had no chance to save itself: said with ExitedAfterKill
	if sig == syscall.SIGKILL {
		// Nothing saves its state on SIGKILL: an exit on it is a kill,
		// never Exited (which a Sandbox reports preserved).
		unsent = errSignalIsKill
		failures = append(failures, errSignalIsKill)
	}
	send := signalUntil
	if sig < 1 || sig > maxSignal {
		// No target can get it: not sent. Sent, a `runsc kill` refused it with a
		// failure that reads as passing (exit status 128), and it was sent again every
		// 100 ms through the whole wait after the signal before SIGKILL (row 976).
		send = func(context.Context, Target, syscall.Signal, *end) error {
			return fmt.Errorf("escalate: Policy.Signal %d is no signal (1-%d; zero means SIGTERM): %w", int(sig), maxSignal, syscall.EINVAL)
		}
	}
	if err := send(ctx, t, sig, termEnd); isGone(err) {
		return Gone, nil
	} else if err != nil {
		failures = append(failures, err)
		if !errors.Is(err, syscall.ECHILD) { // ECHILD: sent, but its status was stolen
			termEnd.cut(time.Now()) // it will not exit on a signal it did not get
			ended = Gone
			if unsent == nil {
				unsent = err // not with ECHILD: taken as delivered, it is no reason
			}
		}
	}
	if ended == Exited && sigCont != 0 && sig != syscall.SIGKILL && sig != sigCont {
		if err := sendCont(ctx, t, sig, termEnd); err != nil {
			failures = append(failures, err)
			if unsent == nil {
				unsent = err // a stopped target never acted on the signal
			}
		}
	}
	exited, err := waitUntil(ctx, t, termEnd)
	if exited && sig == syscall.SIGKILL {
		return ExitedAfterKill, unsent
	}
	if exited {
		return ended, nil
	}
	if err != nil {
		failures = append(failures, err)
	}
	// Not under ctx: a SIGKILL is what enforces ctx's end, and a context that ended
	// during the wait after the signal (a budget that moved SIGKILL earlier) had a
	// runtime driven by commands (`runsc kill`) refuse it, the target left running.
	*killAt = time.Now()
	err = sendKill(ctx, t, killWaitEnd(ctx, *killAt, killWait))
	if isGone(err) {
		if sig == syscall.SIGKILL {
			// Gone after a first SIGKILL that a failing wait did not see
			// end it: that SIGKILL ended it, never Exited.
			return ExitedAfterKill, unsent
		}
		return ended, nil // it exited on its own between the wait and the kill
	}
	killed := time.Now()
	killEnd := killWaitEnd(ctx, killed, killWait)
	// A SIGKILL that failed for a passing reason (`runsc kill --all` that
	// could not fork) is sent again within the kill wait, as the first
	// signal is within its own: sent once, it left the target running.
	tries, err := resend(ctx, func() error { return sendKill(ctx, t, killEnd) }, err, fixedEnd(killEnd).when)
	if isGone(err) {
		return ExitedAfterKill, unsent // gone once a SIGKILL was tried: never Exited
	} else if err != nil {
		failures = append(failures, sendError("SIGKILL", tries, err))
	}
	killErr, late := err, ctx.Err() != nil // late: sent as ctx ended, or after
	if exited, err = waitUntil(ctx, t, fixedEnd(killEnd)); exited {
		// Why it needed SIGKILL, when the first signal never went out (an
		// invalid Policy.Signal, EPERM): it reads otherwise as a target too
		// slow to save itself.
		return ExitedAfterKill, unsent
	}
	// First, and never left out: with every signal delivered and the waits
	// merely over, failures is empty, and a nil error read as success.
	notSeen := unknownEnd(ctx, killErr, late, time.Since(killed))
	if err != nil {
		failures = append(failures, err)
	}
	return ExitUnknown, errors.Join(append([]error{notSeen}, failures...)...)
}

// sendCont sends SIGCONT to t once, right after its first signal sig went out, as
// systemd does after every kill signal but SIGKILL: a target stopped by SIGSTOP (a
// debugger, a job-control stop) that handles sig keeps it pending and stays stopped, so
// it never saved its state, and was SIGKILLed at the end of the wait after the signal. A
// running target ignores SIGCONT. The send ends as the first signal's does (signalUntil).
// It returns nil when SIGCONT went out, or found the target gone (it exited on sig: the
// wait sees it), or its status was stolen (ECHILD: it may have gone out); else an error
// saying a stopped target may not have acted on sig.
func sendCont(ctx context.Context, t Target, sig syscall.Signal, until *end) error {
	began := time.Now()
	sctx, cancel := until.context(ctx, func() time.Time { return later(until.when(), began.Add(killSendWait)) })
	defer cancel()
	err := t.Signal(sctx, sigCont)
	if err == nil || isGone(err) || errors.Is(err, syscall.ECHILD) {
		return nil
	}
	return fmt.Errorf("escalate: sending SIGCONT after %s (a stopped target acts on %s only once continued): %w", signalName(sig), signalName(sig), err)
}

// killSendWait is the least time Policy gives a SIGKILL's send (Target.Signal), even
// past the end of Stop's context: a SIGKILL enforces that end, and must not be
// cancelled by it. A `runsc kill --all` took 0.2-0.6 s under load 8-9 on 2 cores.
const killSendWait = time.Second

// sendKill sends SIGKILL to t under a context of its own, which ctx's end does not
// cut: it ends at until, the end of the kill wait as planned (now, once ctx has
// ended), or killSendWait from now if that is later. Under ctx, a context cancelled
// during the wait after the signal (a budget that moved SIGKILL earlier,
// pause.Preserver.Tighten) had `runsc kill` refuse to start, and the target, which had
// not exited on the signal, ran on.
func sendKill(ctx context.Context, t Target, until time.Time) error {
	now := time.Now()
	if ctx.Err() != nil {
		until = now
	}
	kctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(until, now.Add(killSendWait)))
	defer cancel()
	return t.Signal(kctx, syscall.SIGKILL)
}

// unknownEnd is the first error of an ExitUnknown: ErrExitUnknown, with what happened
// to SIGKILL. killErr is the last SIGKILL send's error, late whether ctx had ended when
// that send returned, and since the time since the first send returned. It said "even
// after SIGKILL" whether SIGKILL went out or not.
func unknownEnd(ctx context.Context, killErr error, late bool, since time.Duration) error {
	since = since.Round(time.Millisecond)
	switch {
	case killErr != nil && !errors.Is(killErr, syscall.ECHILD):
		return fmt.Errorf("%w: SIGKILL could not be sent", ErrExitUnknown)
	case late:
		return fmt.Errorf("%w: SIGKILL sent as the context ended (%v), its effect not waited for", ErrExitUnknown, context.Cause(ctx))
	case killErr != nil: // ECHILD: the sending command's status was stolen
		return fmt.Errorf("%w (%v after a SIGKILL whose send's status was lost: it may not have gone out)", ErrExitUnknown, since)
	case ctx.Err() != nil:
		return fmt.Errorf("%w (%v after SIGKILL, when the context ended: %v)", ErrExitUnknown, since, context.Cause(ctx))
	}
	return fmt.Errorf("%w (%v after SIGKILL)", ErrExitUnknown, since)
}

// killWaitEnd is when a kill wait from from ends: killWait later, or at ctx's
// deadline if that is earlier.
func killWaitEnd(ctx context.Context, from time.Time, killWait time.Duration) time.Time {
	end := from.Add(killWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(end) {
		return dl
	}
	return end
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// signalUntil sends sig to t, and again every retryPause while the send
// fails for a passing reason (a runtime's `runsc kill` that could not
// fork, a busy API) and until is retryPause away: a target that never got
// the signal that saves it would otherwise be SIGKILLed at once. Each send
// ends by until (or killSendWait after it began, if that is later). A send
// the target refuses for good (EPERM, EINVAL, a Target that cannot
// signal), or that the kernel discarded (errDiscarded), is not tried
// again; nor is one that was delivered with its status stolen (ECHILD),
// nor one that found the target gone. The error names the signal and,
// when it was sent more than once, how often.
func signalUntil(ctx context.Context, t Target, sig syscall.Signal, until *end) error {
	send := func() error {
		// A send that hangs (a `runsc kill` whose sandbox's control server never
		// answers) ends with the wait after the signal, or killSendWait after it began
		// if that is later: under ctx alone it ran to ctx's deadline, and the SIGKILL
		// planned KillWait before it went out with no kill wait left.
		began := time.Now()
		sctx, cancel := until.context(ctx, func() time.Time { return later(until.when(), began.Add(killSendWait)) })
		defer cancel()
		return t.Signal(sctx, sig)
	}
	tries, err := resend(ctx, send, send(), until.when)
	if err == nil || isGone(err) {
		return err
	}
	return sendError(sig.String(), tries, err)
}

// resend sends again (send), as signalUntil describes, after a first send
// that returned err. It returns how many sends there were, the first
// included, and the last one's error, unwrapped.
func resend(ctx context.Context, send func() error, err error, until func() time.Time) (int, error) {
	tries := 1
	for ; err != nil && sendAgain(err) && time.Until(until()) > retryPause; tries++ {
		if !sleepCtx(ctx, retryPause) {
			break
		}
		err = send()
	}
	return tries, err
}

// sendError is the error of a send of the signal named sig that failed
// with err after tries sends.
func sendError(sig string, tries int, err error) error {
	if tries > 1 {
		return fmt.Errorf("escalate: sending %s (%d times): %w", sig, tries, err)
	}
	return fmt.Errorf("escalate: sending %s: %w", sig, err)
}

// sendAgain reports whether a failed send may succeed if tried again.
func sendAgain(err error) bool {
	for _, final := range []error{os.ErrProcessDone, syscall.ESRCH, syscall.ECHILD, syscall.EPERM, syscall.EINVAL,
		errors.ErrUnsupported, errNotStarted, errDiscarded} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// waitUntil waits for t to exit until the end until, retrying a wait
// that fails. Once a wait was stolen (ECHILD) it asks t.Exited instead.
// It reports whether t exited, and the last failure.
func waitUntil(ctx context.Context, t Target, until *end) (bool, error) {
	var failed error
	stolen := false
	for {
		wctx, cancel := until.context(ctx, until.when)
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
		left := time.Until(until.when())
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

// errRunning is probe's answer when Exited says the target still runs.
var errRunning = errors.New("escalate: target still running")

// errNoProber is probe's answer for a target that cannot be asked.
var errNoProber = fmt.Errorf("escalate: the wait was stolen (%w) and the target cannot say whether it exited: exit unknown", syscall.ECHILD)

// probe asks t.Exited once: nil if it exited, errRunning if not, another
// error if unknown.
func probe(ctx context.Context, t Target) error {
	exited, err := t.Exited(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return errNoProber
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

// Funcs is a Target over functions, for runtimes driven by commands such
// as `runsc kill <id> <signal>`, `runsc wait <id>` and `runsc state <id>`.
// The functions follow the contract of Target's methods: SignalFunc
// reports an already exited target with os.ErrProcessDone (or ESRCH),
// WaitFunc returns nil only once the target has exited, ExitedFunc answers
// without waiting. A nil SignalFunc or WaitFunc fails with an error
// wrapping errors.ErrUnsupported; a nil ExitedFunc means the runtime
// cannot be asked.
type Funcs struct {
	SignalFunc func(ctx context.Context, sig syscall.Signal) error
	WaitFunc   func(ctx context.Context) error
	ExitedFunc func(ctx context.Context) (bool, error)
}

// errNoFunc is the error of a Funcs method without its function.
func errNoFunc(name string) error {
	return fmt.Errorf("escalate: Funcs.%s is nil: %w", name, errors.ErrUnsupported)
}

// Signal calls SignalFunc.
func (f Funcs) Signal(ctx context.Context, sig syscall.Signal) error {
	if f.SignalFunc == nil {
		return errNoFunc("SignalFunc")
	}
	return f.SignalFunc(ctx, sig)
}

// Wait calls WaitFunc.
func (f Funcs) Wait(ctx context.Context) error {
	if f.WaitFunc == nil {
		return errNoFunc("WaitFunc")
	}
	return f.WaitFunc(ctx)
}

// Exited calls ExitedFunc.
func (f Funcs) Exited(ctx context.Context) (bool, error) {
	if f.ExitedFunc == nil {
		return false, errNoFunc("ExitedFunc")
	}
	return f.ExitedFunc(ctx)
}

// Cmd returns a Target over a started child process, pinned by the pidfd
// os/exec got when it started the child (Linux 5.4+), so a signal or a
// probe never reaches another process that reused its PID, even when
// another reaper took the child before Cmd was called. Its Wait calls
// c.Wait once, in a goroutine, so the child is reaped and its pipes
// closed; an exit with any status or signal counts as exited, seen on the
// pidfd: a grandchild that keeps the child's stdout or stderr open (a
// writer os/exec copies from, with no WaitDelay) holds c.Wait, not Wait,
// which gives c.Wait a second past the exit and returns. When another
// reaper took the child first, Wait fails with ECHILD and Exited answers
// instead, from the pidfd (a zombie counts as exited). A child that had
// exited before the first signal, reaped or not (Cmd reaps only from Wait,
// so a child that crashed before the drain is a zombie until then), never
// gets it: Signal returns os.ErrProcessDone and Policy.Stop says Gone. A
// child that is the init of its PID namespace (started with CLONE_NEWPID: a
// sandbox's init) never gets a signal it has no handler for, neither
// blocking it, waiting for it in sigwait (tini's way) nor traced (but
// SIGKILL, SIGSTOP and SIGCONT): the kernel discards it, and Signal, having
// sent it, says so, read before and after the send from /proc/PID/status
// and /proc/PID/syscall; Policy.Stop then sends SIGKILL at once,
// where it waited the whole wait after the signal for a target that never
// got it (ExitedAfterKill, its error saying why). One
// that exits on its own in the instant between that check and the send (a
// few microseconds) takes the signal as a zombie, with success, and reads
// as one that got it (Exited), as one that exits on its own just after
// the send does: Linux records nothing that orders the exit against the
// signal. Where pidfds are missing (not Linux, or an older kernel) it signals
// through c.Process and probes with signal 0, by PID, as os/exec does, and
// a zombie takes the signal (and is Exited), and its Wait is c.Wait's. The
// caller must not call c.Wait or c.Process.Wait itself; c.ProcessState is
// set once Wait returned nil after a real exit, unless a grandchild still
// holds the child's pipes: then once c.Wait returns.
func Cmd(c *exec.Cmd) Target {
	t := &cmdTarget{c: c, done: make(chan struct{}), waited: c.ProcessState != nil}
	if c.Process != nil && !t.waited {
		// Not proc.Open(c.Process.Pid): a child reaped behind os/exec's back
		// (a wait4(-1) reaper) has left its PID to whichever process gets it
		// next. Without a pidfd, c.Process is used (its own signals say
		// os.ErrProcessDone once it was waited for).
		t.p, _ = proc.Dup(c.Process)
	}
	return t
}

type cmdTarget struct {
	c      *exec.Cmd
	p      *proc.Process // nil without pidfds
	waited bool          // c.Wait had returned before Cmd
	once   sync.Once
	done   chan struct{} // closed once Wait's c.Wait returned
	err    error
}

var errNotStarted = errors.New("escalate: command not started")

// Signal signals the child through its pidfd; a reaped child is done, and
// so is a zombie: a child that exited before the drain (Cmd reaps only
// from Wait) is still there to be signalled, but it never gets the signal,
// and the exit the wait would see is not this signal's (os.ErrProcessDone:
// Policy.Stop says Gone). Its reaping starts.
func (t *cmdTarget) Signal(_ context.Context, sig syscall.Signal) error {
	switch {
	case t.c.Process == nil:
		return errNotStarted
	case t.reaped():
		return os.ErrProcessDone
	case t.p != nil:
		if t.p.Exited() {
			t.reap()
			return os.ErrProcessDone
		}
		discarded, _ := t.p.Discards(sig)
		err := t.p.Signal(sig)
		if errors.Is(err, proc.ErrClosed) { // Wait reaped it meanwhile
			return os.ErrProcessDone
		}
		if err == nil && discarded {
			return t.discarded(sig)
		}
		return err
	}
	return t.c.Process.Signal(sig)
}

// errDiscarded is the error of a signal the kernel discarded: sent, never delivered.
var errDiscarded = errors.New("the kernel discarded it, never delivered")

// discarded returns errDiscarded, naming the child, if the kernel discards sig, just
// sent, as it did before the send: one that installed its handler between the two reads
// may have got it (nil).
func (t *cmdTarget) discarded(sig syscall.Signal) error {
	if still, _ := t.p.Discards(sig); !still {
		return nil
	}
	return fmt.Errorf("%w: the target (pid %d) is the init of its PID namespace, with no handler for it", errDiscarded, t.p.Pid())
}

// reaped reports whether the child has been reaped.
func (t *cmdTarget) reaped() bool {
	if t.waited {
		return true
	}
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Wait reaps the child (c.Wait, once, in a goroutine) or returns at ctx's
// end. With a pidfd it returns once the child exited, even while c.Wait
// still waits for the child's pipes: see exited.
func (t *cmdTarget) Wait(ctx context.Context) error {
	if t.c.Process == nil {
		return errNotStarted
	}
	if t.waited {
		return nil
	}
	t.reap()
	select {
	case <-t.done: // checked first: an exit wins over a context that also ended
		return t.result()
	default:
	}
	if t.p != nil {
		return t.exited(ctx)
	}
	select {
	case <-t.done:
		return t.result()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pipesWait is how long Wait waits, once the pidfd says the child exited,
// for c.Wait to return with it reaped (c.ProcessState set): at once when
// its pipes close with it, never while a grandchild holds one and the Cmd
// has no WaitDelay.
const pipesWait = time.Second

// exited waits for the child's exit on its pidfd, or c.Wait's return, or
// ctx's end. c.Wait reaps the child at its exit but returns only once the
// child's pipes are closed, and a grandchild that inherited one (a daemon
// the child started, with stdout a writer that os/exec copies from)
// keeps it open for as long as it lives: waited for through c.Wait alone,
// a child that exited on the signal at once held Stop to the end of the
// wait after the signal (20 s of a 20 s TermWait; row 1820). Once the pidfd
// says it exited, c.Wait is given pipesWait (within ctx) to return, so
// that c.ProcessState is set as it does; the exit counts either way.
func (t *cmdTarget) exited(ctx context.Context) error {
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	gone := make(chan error, 1)
	wg.Go(func() { gone <- t.p.Wait(pctx) })
	select {
	case <-t.done:
		return t.result()
	case err := <-gone:
		if err != nil && !errors.Is(err, proc.ErrClosed) { // closed: reaped by c.Wait
			select {
			case <-t.done:
				return t.result()
			default:
				return err // ctx's end, or a pidfd that cannot be polled
			}
		}
	}
	timer := time.NewTimer(pipesWait)
	defer timer.Stop()
	select {
	case <-t.done:
		return t.result()
	case <-timer.C:
	case <-ctx.Done():
	}
	return nil // exited: c.Wait reaps it and returns once its pipes close
}

// reap calls c.Wait, once, in a goroutine: it returns when the child has
// exited and its pipes are closed, which a grandchild holding them can
// delay.
func (t *cmdTarget) reap() {
	t.once.Do(func() {
		go func() {
			t.err = t.c.Wait()
			close(t.done)
			if t.p != nil {
				_ = t.p.Close() // reaped: the pidfd has nothing more to say
			}
		}()
	})
}

// Exited asks the pidfd (or, without one, the process with signal 0).
func (t *cmdTarget) Exited(context.Context) (bool, error) {
	switch {
	case t.c.Process == nil:
		return false, errNotStarted
	case t.reaped():
		return true, nil
	case t.p != nil:
		return t.p.Exited() || t.reaped(), nil // closed by Wait meanwhile: reaped
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

// result is Wait's answer once c.Wait returned: nil when c.Wait reaped
// the child (c.ProcessState is set), whatever its status and whatever
// c.Wait said about the child's pipes (exec.ErrWaitDelay when a grandchild
// keeps them open, a copy error); c.Wait's error otherwise (ECHILD: another
// reaper took the child).
func (t *cmdTarget) result() error {
	if t.c.ProcessState != nil {
		return nil
	}
	return t.err
}

// A Sandbox is a pause.Sandbox preserved by signalling: Preserve stops its
// Target with its Policy. The target is expected to save its state on
// the first signal and exit (a gVisor actor on SIGTERM). Preserve returns
// nil when it exited within the wait after the signal; an error wrapping
// pause.ErrGone when it exited without getting the signal (Gone: the
// Report counts it vanished, not preserved, for nothing says it saved its
// state);
// and a permanent error wrapping ErrKilled when it needed SIGKILL (with
// why it never got the first signal, or its SIGCONT, when it did not) or
// ErrExitUnknown when its end could not be observed: signalling again
// cannot help. A zero (or negative) Policy.TermWait waits at most 30 s
// after the signal (the kubelet's default grace, as it waits for a
// container), and less in a window too short for it (see Policy.TermWait):
// a Preserve holds one of the Preserver's slots while it waits, and
// sandboxes that ignore the signal, waited for to the end of the window,
// held every slot, the ones behind them never signalled. A target SIGKILLed
// at that cap, where its window would have let it run on, has its error say
// so, naming Policy.TermWait, whether its end was seen after the SIGKILL
// (ErrKilled) or not (ErrExitUnknown); one SIGKILLed earlier (its context
// cancelled, its first signal not sent) does not. The zero Sandbox, with no
// Target, signals nothing: its Preserve returns a permanent error saying that
// Sandbox.Target is nil.
type Sandbox struct {
	Name   string // the sandbox's ID
	Target Target // what Preserve signals and waits for
	Policy Policy // how: the signal, the wait after the signal and the kill wait
}

// The errors of a Sandbox's Preserve.
var (
	ErrKilled      = errors.New("escalate: target needed SIGKILL; its state may not be saved")
	ErrExitUnknown = errors.New("escalate: target not seen to exit")
)

// maxSignal is the highest signal number Linux has (SIGRTMAX).
const maxSignal = 64

// errSignalIsKill is in Stop's error when Policy.Signal is SIGKILL.
var errSignalIsKill = errors.New("escalate: Policy.Signal is SIGKILL, on which no target saves its state (zero means SIGTERM)")

// errNoTarget is Stop's error for a nil Target.
var errNoTarget = errors.New("escalate: the Target is nil: nothing to signal")

// isNil reports whether t is nil or holds a nil pointer, func or map: a
// Target whose methods would dereference it.
func isNil(t Target) bool {
	if t == nil {
		return true
	}
	switch v := reflect.ValueOf(t); v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map:
		return v.IsNil()
	}
	return false
}

// ID returns s.Name.
func (s *Sandbox) ID() string { return s.Name }

// policy is s.Policy with a zero TermWait made the kubelet's default grace
// (defaultTermWait): a Preserve holds one of the Preserver's slots through
// its wait after the signal, and that wait, run to KillWait before the
// Preserve's deadline (the hard deadline), let sandboxes that ignore the
// signal hold every slot for the whole window, the ones behind them never
// signalled (row 1470).
func (s *Sandbox) policy() Policy {
	p := s.Policy
	if p.TermWait <= 0 {
		p.TermWait = defaultTermWait
	}
	return p
}

// killed is the error of a target that did not exit within the wait after
// the signal, begun at start, and was SIGKILLed at killAt: ErrKilled, saying
// that the cap a zero TermWait sets (defaultTermWait) ended that wait when
// ctx's window would have let it run on. Without it, a sandbox that saves in
// 45 s, SIGKILLed at 30 s of a 10 min window, read as one too slow for the
// window, its Report naming nothing a user could change (row 1590).
func (s *Sandbox) killed(ctx context.Context, start, killAt time.Time) error {
	if !s.capped(ctx, start, killAt) {
		return ErrKilled
	}
	return fmt.Errorf("%w: %s", ErrKilled, s.capNote())
}

// capped reports whether the cap a zero TermWait sets (defaultTermWait),
// not ctx's window, ended the wait after the signal begun at start, with
// the SIGKILL sent at killAt: TermWait unset, the SIGKILL no earlier than
// the cap (not at ctx's cancel, nor at once after a first signal that
// failed), and ctx's deadline leaving the wait room past it. Read from
// ctx's deadline alone, a SIGKILL at a cancel 5 s after SIGTERM was said to
// be the cap's (row 1821).
func (s *Sandbox) capped(ctx context.Context, start, killAt time.Time) bool {
	capped := start.Add(defaultTermWait)
	if s.Policy.TermWait > 0 || killAt.IsZero() || killAt.Before(capped) {
		return false
	}
	killWait := s.Policy.KillWait
	if killWait <= 0 {
		killWait = defaultKillWait
	}
	dl, ok := ctx.Deadline()
	return !ok || dl.Add(-killWait).After(capped) // else the window ended the wait
}

// capNote says that the cap a zero TermWait sets ended the wait after the
// signal, for the error of a Sandbox SIGKILLed there.
func (s *Sandbox) capNote() string {
	return fmt.Sprintf("it did not exit within %v of %s (Policy.TermWait unset: the wait after the signal is at most %v, the kubelet's default grace; a longer save needs a longer TermWait)",
		defaultTermWait, signalName(s.Policy.Signal), defaultTermWait)
}

// signalName names a Policy's first signal: SIGTERM for zero.
func signalName(sig syscall.Signal) string {
	if sig == 0 || sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return sig.String()
}

// Preserve stops the target; see Sandbox.
func (s *Sandbox) Preserve(ctx context.Context) error {
	if isNil(s.Target) {
		return backoff.Permanent(fmt.Errorf("escalate: sandbox %q: Sandbox.Target is nil: nothing to signal", s.Name))
	}
	start := time.Now()
	var killAt time.Time
	exit, err := s.policy().stop(ctx, s.Target, &killAt)
	switch exit {
	case Exited:
		return nil
	case Gone:
		return fmt.Errorf("escalate: %s exited without getting the signal: %w", s.Name, pause.ErrGone)
	case ExitedAfterKill:
		if err != nil { // why: the first signal never went out, or its SIGCONT did not
			return backoff.Permanent(fmt.Errorf("%w: %w", ErrKilled, err))
		}
		return backoff.Permanent(s.killed(ctx, start, killAt))
	}
	if !errors.Is(err, ErrExitUnknown) { // Stop's own says it
		err = fmt.Errorf("%w: %w", ErrExitUnknown, err)
	}
	if s.capped(ctx, start, killAt) {
		// As an exit after SIGKILL says it (row 1590): the SIGKILL whose
		// end was not seen came at the cap, not at the window's end (row 1822).
		err = fmt.Errorf("%w; %s", err, s.capNote())
	}
	return backoff.Permanent(err)
}
