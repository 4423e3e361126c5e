package escalate_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// Sandboxes preserved by signalling share a Preserver's slots: one that
// ignores SIGTERM holds its slot through its wait after the signal. With
// the package's typical wiring (Policy{KillWait: 2 s}, TermWait zero) that
// wait ran to KillWait before the Preserve's deadline, the hard deadline:
// 8 sandboxes that ignore SIGTERM, listed first, held the 8 slots for the
// whole window, and the 8 behind them, which save on SIGTERM in a second,
// never got it (not started, unsignalled at the end). A Sandbox's zero
// TermWait now waits at most the kubelet's default grace, 30 s, as the
// kubelet waits for a container, so the window is shared:
//
//	0 s    SIGTERM to the 8 that ignore it
//	30 s   SIGKILL to them; SIGTERM to the 8 behind
//	31 s   the 8 saved and exited: preserved         (phase deadline 10 min)
func TestSandboxesIgnoringTheSignalHoldTheirSlotsNoLongerThanTheKubeletsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := escalate.Policy{KillWait: 2 * time.Second} // the package doc's wiring
		var sbs []pause.Sandbox
		var ignore, save []*fakeTarget
		for i := range 16 {
			f := newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: time.Second, syscall.SIGKILL: 0})
			if i < 8 {
				f = newFake(map[syscall.Signal]time.Duration{syscall.SIGKILL: 0})
				ignore = append(ignore, f)
			} else {
				save = append(save, f)
			}
			sbs = append(sbs, &escalate.Sandbox{Name: fmt.Sprint("sb-", i), Target: f, Policy: policy})
		}
		p, err := pause.New(listOnce(sbs...), pause.Config{Limit: 8, Order: pause.OrderFIFO})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Now().Add(11*time.Minute))

		assert.Equal(t, 8, rep.Counts[pause.Preserved], "the 8 that save on SIGTERM: %v", rep.Counts)
		assert.Equal(t, 8, rep.Counts[pause.Failed], "the 8 that ignore it, SIGKILLed: %v", rep.Counts)
		assert.Zero(t, rep.Counts[pause.NotStarted], "none left unsignalled")
		for _, f := range ignore {
			assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@30.000"}, f.sent())
		}
		for _, f := range save {
			assert.Equal(t, []string{"terminated@30.000", "continued@30.000"}, f.sent())
		}
	})
}

// Fault (row 1590): a Sandbox whose Policy gives no TermWait is SIGKILLed
// 30 s after SIGTERM (row 1470) however long its window, and the Report's
// entry said only "target needed SIGKILL; its state may not be saved": a
// sandbox that saves in 45 s, in a 10 min phase, reads as one too slow for
// the window, where the 30 s cap, which a TermWait lifts, cut it. Its error
// now names the cap and the field.
func TestASandboxKilledAtTheDefaultTermWaitSaysSoInTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: 45 * time.Second, syscall.SIGKILL: 0})
		sb := &escalate.Sandbox{Name: "sb-slow", Target: f, Policy: escalate.Policy{KillWait: 2 * time.Second}}
		p, err := pause.New(listOnce(sb), pause.Config{Limit: 1})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Now().Add(11*time.Minute))

		require.Len(t, rep.Entries, 1)
		e := rep.Entries[0]
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@30.000"}, f.sent())
		assert.Contains(t, e.Error, "did not exit within 30s of SIGTERM")
		assert.Contains(t, e.Error, "Policy.TermWait")
	})
}

// A window shorter than the default wait ends it first: the error then
// does not blame the cap.
func TestASandboxKilledByItsWindowDoesNotBlameTheDefaultTermWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(map[syscall.Signal]time.Duration{syscall.SIGTERM: 45 * time.Second, syscall.SIGKILL: 0})
		sb := &escalate.Sandbox{Name: "sb-slow", Target: f, Policy: escalate.Policy{KillWait: 2 * time.Second}}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		err := sb.Preserve(ctx)
		require.ErrorIs(t, err, escalate.ErrKilled)
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@18.000"}, f.sent())
		assert.NotContains(t, err.Error(), "TermWait")
	})
}

// Fault: a Sandbox whose Policy gives no TermWait, SIGKILLed because its
// Preserve's context was cancelled 5 s after SIGTERM (its server gave up
// the drain; the deadline, 10 min off, unmoved), read in the Report as
// killed at the 30 s cap: "it did not exit within 30s of SIGTERM
// (Policy.TermWait unset ...)", which no TermWait would have changed. The
// cap is named only when the SIGKILL came at it.
//
//	0 s   SIGTERM (ignored)
//	5 s   the context cancelled: SIGKILL; exits       error: ErrKilled, no word of TermWait
func TestASandboxKilledAtItsContextsCancelDoesNotBlameTheDefaultTermWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		// A runtime whose kill returns once SIGKILL has taken the target (a
		// process's pidfd at once, `runsc kill --all` once the sandbox is down).
		target := escalate.Funcs{
			SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
				err := f.Signal(ctx, sig)
				if sig == syscall.SIGKILL {
					f.once.Do(func() { close(f.exited) })
				}
				return err
			},
			WaitFunc: func(ctx context.Context) error {
				select {
				case <-f.exited: // an exit wins over a context that also ended, as Cmd's
					return nil
				default:
					return f.Wait(ctx)
				}
			},
		}
		sb := &escalate.Sandbox{Name: "sb-ignores", Target: target, Policy: escalate.Policy{KillWait: 2 * time.Second}}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		time.AfterFunc(5*time.Second, cancel)
		err := sb.Preserve(ctx)
		require.ErrorIs(t, err, escalate.ErrKilled)
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@05.000"}, f.sent())
		assert.NotContains(t, err.Error(), "TermWait", "SIGKILL came at the cancel, 25 s before the cap")
	})
}

// Fault: a Sandbox whose Policy gives no TermWait, SIGKILLed at the 30 s
// cap and not seen to exit in the kill wait, had a Report entry that said
// only "target not seen to exit (2s after SIGKILL)": nothing said the cap,
// which a TermWait lifts, not its window (10 min), had sent the SIGKILL,
// as the entry of one seen to exit after it does (row 1590).
//
//	0 s   SIGTERM (ignored)
//	30 s  SIGKILL at the cap (ignored: a process stuck in the kernel)
//	32 s  kill wait over: unknown, naming Policy.TermWait
func TestASandboxNotSeenToExitAfterTheDefaultTermWaitSaysSoInTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(nil)
		sb := &escalate.Sandbox{Name: "sb-stuck", Target: f, Policy: escalate.Policy{KillWait: 2 * time.Second}}
		p, err := pause.New(listOnce(sb), pause.Config{Limit: 1})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Now().Add(11*time.Minute))

		require.Len(t, rep.Entries, 1)
		e := rep.Entries[0]
		assert.Equal(t, []string{"terminated@00.000", "continued@00.000", "killed@30.000"}, f.sent())
		assert.Contains(t, e.Error, "target not seen to exit (2s after SIGKILL)")
		assert.Contains(t, e.Error, "did not exit within 30s of SIGTERM")
		assert.Contains(t, e.Error, "Policy.TermWait")
	})
}
