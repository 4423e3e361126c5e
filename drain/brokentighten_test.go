package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// brokenTighteningStep is a Step with a Tighten that panics, as a user's
// teardown that counts its moves in a map it never made: it runs until its
// context ends.
type brokenTighteningStep struct {
	phase deadline.Phase
	moves map[string]int // never made: Tighten panics
	ended time.Time      // when Run's context ended
}

func (s *brokenTighteningStep) Phase() deadline.Phase { return s.phase }

func (s *brokenTighteningStep) Run(ctx context.Context) (any, error) {
	<-ctx.Done()
	s.ended = time.Now()
	return nil, ctx.Err()
}

func (s *brokenTighteningStep) Tighten(time.Time) bool {
	s.moves["tighten"]++
	return true
}

// A Step whose Tighten panics when its deadline moves (a Force, the budget
// moving SIGKILL earlier) fails, its PhaseReport naming the panic, its
// context still ends at the moved deadline, and the steps after it run.
// Tighten was called from the follower's goroutine outside any recover,
// and the panic ended the process mid-step: the later steps and the
// Report lost.
//
//	0 s    SIGTERM: 2 sandboxes preserved (1 s each, one at a time)
//	2 s    step "ublk" begins, its window the hour's
//	3 s    Force (or the budget moves SIGKILL to 20 s): ublk is told, and
//	       its Tighten panics
//	6 s    (18 s) ublk's context ends at the moved deadline all the same:
//	       the step failed, naming the panic
//	       step "http" runs: OK
func TestAStepWhoseTightenPanicsFailsTheStepNotTheProcess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		move  func(f *fixture)
		ended time.Duration // after SIGTERM
	}{
		// its 3 s reserve from the force
		{"forced", func(f *fixture) { f.d.Force() }, 6 * time.Second},
		// its new SIGKILL less the margin and http's reserve
		{"budget moved", func(f *fixture) { f.budget.Tighten(f.budget.State().SIGTERM.Add(20 * time.Second)) }, 18 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ublk := &brokenTighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(3 * time.Second)}}
				var ran []string
				f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 2, latency: time.Second,
					steps: []Step{ublk, recordStep("http", time.Second, &ran)}})
				rep := f.shutdownMeanwhile(3*time.Second, func() { tc.move(f) })

				require.NotNil(t, rep.Preserve)
				assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
				p := rep.Phase("ublk")
				require.NotNil(t, p)
				assert.Equal(t, tc.ended, ublk.ended.Sub(rep.Budget.SIGTERM), "its context ended at the moved deadline")
				assert.True(t, p.fault(), "ublk: %s", p.Result)
				assert.Contains(t, p.Error, "drain: step ublk's Tighten (*drain.brokenTighteningStep) panicked: assignment to entry in nil map")
				assert.Equal(t, []string{"http"}, ran, "the step after it ran")
				assert.Equal(t, OK, rep.Phase("http").Result)
				assert.ErrorContains(t, rep.Err(), "ublk's Tighten")
			})
		})
	}
}

// brokenTighteningPreserver is the default Preserver behind a user's
// wrapper whose Tighten panics (it counts the moves in a map it never
// made).
type brokenTighteningPreserver struct {
	*pause.Preserver
	moves    map[string]int
	returned chan struct{} // closed when Run returns
}

func (p brokenTighteningPreserver) Run(ctx context.Context, hard time.Time) *pause.Report {
	defer close(p.returned)
	return p.Preserver.Run(ctx, hard)
}

func (p brokenTighteningPreserver) Tighten(time.Time) bool {
	p.moves["tighten"]++
	return true
}

// A Preserver whose Tighten panics when the budget moves SIGKILL earlier
// during the preserve phase is one that cannot be told: the phase fails
// naming the panic, ends at its new deadline (the Preserver, its
// preserve in flight kept to the hard deadline it was called with, is
// abandoned at the moved one, row 3402: its Report lost, the sandboxes
// counted unaccounted for), and the steps run. Tighten
// was called from the follower's goroutine (and again from the phase's
// context.AfterFunc) outside any recover, and the panic ended the process
// mid-phase: every sandbox not yet preserved, the steps and the Report
// lost.
//
//	0 s    SIGTERM (grace 60 s): 4 sandboxes, 2 s each, one at a time
//	1 s    the budget moves SIGKILL to 10 s: the Preserver is told, and its
//	       Tighten panics
//	7.5 s  the phase's new deadline: no preserve starts after it; the
//	       one begun at 6 s runs on to 8 s, and is not waited for
//	       step "ublk" runs: OK
func TestAPreserverWhoseTightenPanicsFailsThePhaseNotTheProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		returned := make(chan struct{})
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 4, latency: 2 * time.Second, limit: 1,
			steps: []Step{stepOf("ublk", time.Second, true, func(context.Context) error { ran = append(ran, "ublk"); return nil })},
			edit: func(c *Config) {
				p, err := pause.New(c.Sandboxes, c.Pause)
				require.NoError(t, err)
				c.Preserver = brokenTighteningPreserver{Preserver: p, returned: returned}
			}})
		rep := f.shutdownMeanwhile(time.Second, func() { f.budget.Tighten(f.budget.State().SIGTERM.Add(10 * time.Second)) })

		p := rep.Phase(PhasePreserve)
		require.NotNil(t, p)
		t.Logf("preserve: %s at +%v (deadline +%v): %s; %d unaccounted for", p.Result, p.End.Sub(rep.Budget.SIGTERM),
			p.Deadline.Sub(rep.Budget.SIGTERM), p.Error, rep.Unaccounted)
		assert.Equal(t, Abandoned, p.Result, "not told the move, waited for to the moved hard deadline only")
		assert.Contains(t, p.Error, "drain: the Preserver's Tighten (drain.brokenTighteningPreserver) panicked: assignment to entry in nil map")
		assert.Less(t, p.End.Sub(rep.Budget.SIGTERM), 10*time.Second, "the phase ended before the new SIGKILL")
		assert.Nil(t, rep.Preserve, "abandoned: its Report is lost")
		assert.Equal(t, 4, rep.Unaccounted, "the sandboxes counted at the gate, unaccounted for")
		assert.Equal(t, []string{"ublk"}, ran, "the step after it ran")
		assert.Equal(t, OK, rep.Phase("ublk").Result)
		<-returned // its preserve in flight ends by the hard deadline it was called with
	})
}
