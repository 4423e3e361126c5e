//go:build linux

package runsc

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause/escalate"
)

// Fault (row 970): a Stop whose context ended after its SIGTERM (the drain's budget moved
// SIGKILL earlier while the escalate step waited: a deletion with a shorter grace read
// then) sent no SIGKILL to a sandbox that ignored the SIGTERM: `runsc kill --all 9` ran
// under that context, which exec refused to start, so the sandbox ran on until the pod's
// SIGKILL, and Stop said "not seen to exit, even after SIGKILL (0s after it)" of a
// SIGKILL never sent. The kill is now sent under a short context of its own: the sandbox
// stops, and the error says that SIGKILL went out as the context ended, not waited for.
func TestSIGKILLGoesOutWhenTheContextEndsAfterSIGTERM(t *testing.T) {
	rt := realRuntime(t)
	b := startActor(t, rt, containerID("tight"), ignoreTermArgs(), false)
	waitCounter(t, b, 0) // the trap is set before the first count

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	real := rt.Target(containerID("tight"))
	target := escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			err := real.Signal(ctx, sig)
			if sig == syscall.SIGTERM {
				cancel() // the deadline moved to now: the wait after SIGTERM ends here
			}
			return err
		},
		WaitFunc:   real.Wait,
		ExitedFunc: real.Exited,
	}
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 20 * time.Second, KillWait: 5 * time.Second}.Stop(ctx, target)
	elapsed := time.Since(start)
	t.Logf("Stop: %s after %v: %v", exit, elapsed, err)

	assert.Equal(t, escalate.ExitUnknown, exit, "its end was not waited for: the context had ended")
	require.ErrorIs(t, err, escalate.ErrExitUnknown)
	assert.Contains(t, err.Error(), "SIGKILL sent as the context ended")
	assert.NotContains(t, err.Error(), "even after SIGKILL")
	assert.Less(t, elapsed, 20*time.Second, "neither wait ran on: the context had ended")
	// The sandbox, which ignores SIGTERM, ends only by that SIGKILL: before, it ran on.
	stopped := func() bool { gone, _ := rt.Exited(context.Background(), containerID("tight")); return gone }
	returned := time.Now()
	if assert.Eventually(t, stopped, 20*time.Second, 50*time.Millisecond, "the SIGKILL reached the sandbox") {
		t.Logf("stopped %v after Stop returned", time.Since(returned))
	}
}

// Fault (row 975): a `runsc kill 15` that hung (the sandbox's control server took the
// connection and never answered: a wedged sentry, as a sandbox its checkpoint could not
// reach may be) held the escalation to its context's deadline: the SIGKILL planned
// KillWait before it went out only then, with no kill wait, and the end was unknown. The
// SIGTERM's send now ends with the wait after it. Here a wrapper of runsc hangs every kill
// with signal 15; the rest is runsc's own.
//
// Row 1140: the kill wait was 1 s (a 3 s window), and on a machine at load 20 the
// SIGKILL's runsc, the sandbox's end and runsc's word of it took longer than that: the
// end unknown at the deadline with the behaviour right. SIGKILL still goes out 2 s in,
// the hung send's end (TermWait: in a window shorter than two kill waits the default
// is half of it); the kill wait that follows is 10 s, which a Stop that sees the end
// returns from at once, and which, before row 975's fix, the hung send held to the
// deadline as it did the 1 s.
func TestHungSIGTERMSendLeavesTheKillWait(t *testing.T) {
	rt := realRuntime(t)
	b := startActor(t, rt, containerID("hung"), CounterArgs(), false)
	waitCounter(t, b, 0)
	hung := wrappedRuntime(t, rt, `case " $* " in *" kill "*" 15 "*) exec sleep 3600 ;; esac`)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second) // SIGKILL at 2 s
	defer cancel()
	start := time.Now()
	exit, err := escalate.Policy{TermWait: 2 * time.Second, KillWait: 10 * time.Second}.Stop(ctx, hung.Target(containerID("hung")))
	t.Logf("Stop returned after %v", time.Since(start).Round(time.Millisecond))
	t.Logf("Stop: %s: %v", exit, err)
	assert.Equal(t, escalate.ExitedAfterKill, exit, "SIGKILL went out on time and its end was seen")
	assert.ErrorContains(t, err, "sending terminated", "why it never got the SIGTERM")
	assert.NoError(t, ctx.Err(), "seen within the window")
}
