package escalate_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause/escalate"
)

// commandSends is f behind a runtime driven by commands bound to their context (`runsc
// kill` run with exec.CommandContext): a send under a context that has ended never
// starts, and fails with the context's error; with hang, a SIGKILL's command does not
// return until its context ends (a runsc kill stuck on the sandbox's control server).
func commandSends(f *fakeTarget, hang bool) escalate.Target {
	return escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("runsc kill %d: %w", sig, err)
			}
			if hang && sig == syscall.SIGKILL {
				<-ctx.Done()
				return fmt.Errorf("runsc kill %d: signal: killed (%w)", sig, ctx.Err())
			}
			return f.Signal(ctx, sig)
		},
		WaitFunc: f.Wait,
	}
}

// Fault (row 970): a Stop whose context ended during the wait after the signal (the
// drain's budget moved SIGKILL earlier: a deletion with a shorter grace, read then) sent
// its SIGKILL under that context, which a runtime driven by commands refuses: the target,
// which did not exit on SIGTERM, ran on to the pod's SIGKILL, and the error said "not
// seen to exit, even after SIGKILL (0s after it)". The SIGKILL is now sent under a
// context of its own, and the error says it went out as the context ended.
//
//	0 s   SIGTERM: ignored
//	1 s   the context is cancelled: SIGKILL at once, its end not waited for
//
// The send is bounded: one that hangs is given a second, and Stop returns then,
// saying that SIGKILL could not be sent.
func TestSIGKILLGoesOutWhenTheContextEndsAfterTheFirstSignal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hang  bool
		sent  []string
		first string
		took  time.Duration
	}{
		{"sent", false, []string{"terminated@00.000", "continued@00.000", "killed@01.000"},
			"escalate: target not seen to exit: SIGKILL sent as the context ended (context canceled), its effect not waited for", time.Second},
		{"send hangs", true, []string{"terminated@00.000", "continued@00.000"},
			"escalate: target not seen to exit: SIGKILL could not be sent", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFake(nil)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				time.AfterFunc(time.Second, cancel)
				start := time.Now()
				exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, commandSends(f, tc.hang))
				assert.Equal(t, tc.sent, f.sent())
				assert.Equal(t, escalate.ExitUnknown, exit)
				require.ErrorIs(t, err, escalate.ErrExitUnknown)
				first, _, _ := strings.Cut(err.Error(), "\n")
				assert.Equal(t, tc.first, first)
				if tc.hang {
					assert.ErrorIs(t, err, context.DeadlineExceeded, "the send's own bound, not the cancelled context")
				}
				assert.Equal(t, tc.took, time.Since(start), "nothing waited for past the context's end but the send")
			})
		})
	}
}

// The words of an unknown end say what happened to SIGKILL: one that went out and was
// waited for names the wait; one that could not be sent says so, where both said "even
// after SIGKILL".
func TestUnknownEndSaysWhetherSIGKILLWentOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exit, err := escalate.Policy{TermWait: time.Second, KillWait: 2 * time.Second}.Stop(t.Context(), newFake(nil))
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.EqualError(t, err, "escalate: target not seen to exit (2s after SIGKILL)")

		refused := escalate.Funcs{
			SignalFunc: func(_ context.Context, sig syscall.Signal) error {
				if sig == syscall.SIGKILL {
					return fmt.Errorf("runsc kill --all: %w", syscall.EPERM)
				}
				return nil
			},
			WaitFunc: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}
		exit, err = escalate.Policy{TermWait: time.Second, KillWait: 2 * time.Second}.Stop(t.Context(), refused)
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.ErrorIs(t, err, syscall.EPERM)
		assert.EqualError(t, err, "escalate: target not seen to exit: SIGKILL could not be sent\n"+
			"escalate: sending SIGKILL: runsc kill --all: operation not permitted")
	})
}

// The same with a real child that ignores SIGTERM, signalled by a command bound to the
// context (kill(1), as runsc kill is run): the context cancelled after the SIGTERM, the
// SIGKILL still reaches the child. Before, the child ran on.
func TestSIGKILLByACommandReachesTheChildAfterTheContextEnded(t *testing.T) {
	cmd, _ := child(t, "ignore")
	real := escalate.Cmd(cmd)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	target := escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			err := exec.CommandContext(ctx, "kill", fmt.Sprintf("-%d", sig), fmt.Sprint(cmd.Process.Pid)).Run()
			if sig == syscall.SIGTERM {
				cancel() // the deadline moved to now
			}
			return err
		},
		WaitFunc:   real.Wait,
		ExitedFunc: real.Exited,
	}
	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, target)
	t.Logf("Stop: %s: %v", exit, err)
	if exit != escalate.ExitedAfterKill { // unless Cmd's reaping had already seen the kill
		assert.Equal(t, escalate.ExitUnknown, exit)
		assert.ErrorContains(t, err, "SIGKILL sent as the context ended")
	}
	waitCtx, done := context.WithTimeout(t.Context(), 10*time.Second)
	defer done()
	require.NoError(t, real.Wait(waitCtx), "the SIGKILL ended the child")
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%v", ws)
}

// Fault (row 975): the first signal's send ran under Stop's context alone, so a send that
// hung (a `runsc kill 15` whose sandbox's control server took the connection and never
// answered: a wedged sentry, the very sandbox a checkpoint could not reach) held Stop
// past the end of the wait after the signal, to the context's deadline: the SIGKILL
// planned KillWait before it went out only then, with no kill wait left, and the end was
// unknown. The send now ends with the wait after the signal (or a second after it began,
// if that is later), and SIGKILL goes out on time.
//
//	0 s   SIGTERM: its send hangs
//	8 s   the wait after the signal ends: the send is cut, SIGKILL
//	8.1 s the target exits                      -> ExitedAfterKill
func TestHungFirstSignalDoesNotSpendTheKillWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 100 * time.Millisecond})
		target := escalate.Funcs{
			SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
				if sig == syscall.SIGTERM {
					<-ctx.Done()
					return fmt.Errorf("runsc kill 15: signal: killed (%w)", ctx.Err())
				}
				return f.Signal(ctx, sig)
			},
			WaitFunc: f.Wait,
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		exit, err := escalate.Policy{KillWait: 2 * time.Second}.Stop(ctx, target)
		assert.Equal(t, []string{"killed@08.000"}, f.sent(), "SIGKILL KillWait before the deadline")
		assert.Equal(t, escalate.ExitedAfterKill, exit, "%v", err)
		assert.ErrorContains(t, err, "escalate: sending terminated: runsc kill 15: signal: killed (context deadline exceeded)",
			"why it never got the first signal")
		assert.Equal(t, 8100*time.Millisecond, time.Since(start))
	})
}

// Fault (row 976): a Policy.Signal that is no signal went to the target's runtime, and a
// runtime driven by commands refuses it with a failure that reads as passing (`runsc kill
// ID 99`: exit status 128, `unknown signal "99"`): it was sent again every 100 ms through
// the whole wait after the signal, 20 s here, and only then SIGKILL, where escalate.Cmd's
// EINVAL had SIGKILL at once. It is not sent: SIGKILL goes out at once, and the error
// names the field.
func TestSignalThatIsNoSignalIsNotSentAndSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 100 * time.Millisecond})
		sends := 0
		target := escalate.Funcs{
			SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
				if sig == 99 {
					sends++
					return errors.New(`runsc kill sb 99: exit status 128: unknown signal "99"`) // runsc 0.0~20221219's words
				}
				return f.Signal(ctx, sig)
			},
			WaitFunc: f.Wait,
		}
		start := time.Now()
		exit, err := escalate.Policy{Signal: 99, TermWait: 20 * time.Second}.Stop(t.Context(), target)
		assert.Zero(t, sends, "a number that is no signal was sent")
		assert.Equal(t, []string{"killed@00.000"}, f.sent())
		assert.Equal(t, escalate.ExitedAfterKill, exit)
		require.ErrorIs(t, err, syscall.EINVAL)
		assert.EqualError(t, err, "escalate: Policy.Signal 99 is no signal (1-64; zero means SIGTERM): invalid argument")
		assert.Equal(t, 100*time.Millisecond, time.Since(start))
	})
}
