package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// lateRun is a *pause.Preserver whose Run, once called, waits for resume
// before it runs: the moment between the phase reading its deadlines and
// the Run registering as the one in progress, made long.
type lateRun struct {
	*pause.Preserver
	called, resume chan struct{}
}

func (l lateRun) Run(ctx context.Context, hard time.Time) *pause.Report {
	close(l.called)
	<-l.resume
	return l.Preserver.Run(ctx, hard)
}

// Fault: a budget move that landed after the preserve phase read its
// deadlines for a Run and before that Run registered as the one in
// progress was lost: the Run was given the old hard deadline, and the
// Tighten the follower sent found no Run in progress, so the preserves ran
// past the new SIGKILL. The phase now tells the Run the deadlines as they
// stand when its context ends. docs/faults.md row 741.
//
//	0 s    SIGTERM (grace 60 s, margin 1 s); the phase reads its hard
//	       deadline (59 s less the step) and calls Run
//	0 s    the budget moves SIGKILL to 10 s, before Run registers
//	8.5 s  sb-0 (30 s) is cut; the ublk step (was: sb-0 preserved at
//	       30 s, the ublk step after it, 20 s past SIGKILL)
func TestBudgetMovedAsRunStartsCutsItsPreserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		late := lateRun{called: make(chan struct{}), resume: make(chan struct{})}
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: time.Second, sandboxes: 1, latency: 30 * time.Second, limit: 1,
			steps: []Step{stepOf("ublk", 500*time.Millisecond, true, func(context.Context) error { ran = append(ran, "ublk"); return nil })},
			edit: func(c *Config) {
				p, err := pause.New(c.Sandboxes, c.Pause)
				require.NoError(t, err)
				late.Preserver = p
				c.Preserver = late
			}})
		go func() {
			<-late.called
			f.budget.Tighten(f.budget.State().SIGTERM.Add(10 * time.Second))
			synctest.Wait() // the follower has seen the move
			close(late.resume)
		}()
		rep := f.d.Shutdown(context.Background())
		sigterm := rep.Budget.SIGTERM

		require.True(t, rep.Budget.Kill.Equal(sigterm.Add(10*time.Second)), "SIGKILL %v after SIGTERM", rep.Budget.Kill.Sub(sigterm))
		require.NotNil(t, rep.Preserve)
		require.Len(t, rep.Preserve.Entries, 1)
		assertCutForTheUblkStep(t, rep, rep.Preserve.Entries[0], ran)
	})
}
