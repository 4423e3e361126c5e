package drain

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// A step follows the budget as the gate and preserve phases do (row 235; row 369):
// with no sandboxes the first step starts at once after SIGTERM, and the
// pod read that lands 100 ms later (a deletion of 3 s, the manifest's 60 s)
// must end it at its new deadline, leaving the critical step after it its
// reserve before SIGKILL.
func TestStepFollowsAReadLandingDuringIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := deletedPodReadLate(t, 3*time.Second, 100*time.Millisecond)
		var ublkAt time.Time
		server := step("http", 500*time.Millisecond, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		ublk := stepOf("ublk", 500*time.Millisecond, true, func(ctx context.Context) error { ublkAt = time.Now(); return nil })
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, steps: []Step{server, ublk},
			edit: func(c *Config) { c.Pod = pod }})
		rep := f.d.Shutdown(context.Background())
		kill := rep.Budget.SIGTERM.Add(3 * time.Second).Truncate(time.Second)
		require.True(t, rep.Budget.Kill.Equal(kill), "the deletion's SIGKILL %v, not %v", kill, rep.Budget.Kill)
		assert.True(t, ublkAt.Before(kill.Add(-500*time.Millisecond)), "ublk started at %v, SIGKILL %v", ublkAt.Sub(rep.Budget.SIGTERM), kill.Sub(rep.Budget.SIGTERM))
		assert.Positive(t, rep.Headroom, "exit before SIGKILL")
	})
}

// tighteningStep is a Step with a Tighten method, as *ublk.Teardown: it
// records what it is told and when, and runs until its context ends.
type tighteningStep struct {
	phase   deadline.Phase
	mu      sync.Mutex
	told    []time.Time // the deadlines Tighten gave
	toldAt  []time.Time // when
	running bool
	began   time.Time // when Run began
	planned time.Time // its context's deadline then
	ended   time.Time // when Run's context ended
	// entering, when set, is called as Run begins, before the step can be
	// told anything (before it registers as running, as *ublk.Teardown's
	// Stop does before it plans).
	entering func()
}

func (s *tighteningStep) Phase() deadline.Phase { return s.phase }

func (s *tighteningStep) Run(ctx context.Context) (any, error) {
	if s.entering != nil {
		s.entering()
	}
	s.mu.Lock()
	s.running, s.began = true, time.Now()
	s.planned, _ = ctx.Deadline()
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running, s.ended = false, time.Now()
	return nil, ctx.Err()
}

func (s *tighteningStep) Tighten(dl time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return false
	}
	s.told, s.toldAt = append(s.told, dl), append(s.toldAt, time.Now())
	return true
}

//	SIGTERM        the critical "ublk" step starts at once (no sandboxes),
//	               its window the manifest's 60 s less the margin
//	+100 ms        the pod read lands: a deletion of 3 s; the step's
//	               window ends at the new deadline, and the step is told
//	               that deadline (Tighten), then
//	new deadline   its context ends there
//
// Before, the step's context was cancelled at the new deadline and the
// step was told nothing: the ublk teardown, its control fallback and
// kill planned near the end of 60 s, ran none of them before SIGKILL.
func TestStepIsToldItsDeadlineMovedEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := deletedPodReadLate(t, 3*time.Second, 100*time.Millisecond)
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second), Critical: true}}
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, steps: []Step{ublk},
			edit: func(c *Config) { c.Pod = pod }})
		rep := f.d.Shutdown(context.Background())
		sigterm := rep.Budget.SIGTERM
		kill := sigterm.Add(3 * time.Second).Truncate(time.Second)
		require.True(t, rep.Budget.Kill.Equal(kill), "the deletion's SIGKILL %v, not %v", kill, rep.Budget.Kill)
		p := rep.Phase("ublk")
		require.NotNil(t, p)
		assert.Less(t, p.Deadline.Sub(sigterm), 3*time.Second, "the step's window ends before the deletion's SIGKILL")

		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		require.Len(t, ublk.told, 1, "told once")
		assert.True(t, ublk.told[0].Equal(p.Deadline), "told the window's new deadline %v, not %v",
			p.Deadline.Sub(sigterm), ublk.told[0].Sub(sigterm))
		assert.Equal(t, 100*time.Millisecond, ublk.toldAt[0].Sub(p.Start), "told as the read landed")
		assert.True(t, ublk.ended.Equal(p.Deadline), "its context ended at the new deadline: %v", ublk.ended.Sub(sigterm))
		assert.Equal(t, TimedOut, p.Result)
	})
}

//	SIGTERM    the critical "ublk" step starts at once (no sandboxes), its
//	           window the hour's grace less the margin
//	+1 s       Force (a person's second Ctrl-C): the step gets only its
//	           3 s reserve from now, and is told so (Tighten)
//	+4 s       its context ends
//
// Before, the step's context was cancelled at +4 s and the step was told
// nothing: the ublk teardown, its control fallback and kill planned at
// the end of the hour, ran none of them.
func TestForcedStepIsToldItsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(3 * time.Second), Critical: true}}
		f := newFixture(t, fixtureOpts{grace: time.Hour, steps: []Step{ublk}})
		rep := f.shutdownMeanwhile(time.Second, f.d.Force)
		p := rep.Phase("ublk")
		require.NotNil(t, p)

		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		assert.Greater(t, ublk.planned.Sub(p.Start), 50*time.Minute, "the hour's window at the start")
		require.Len(t, ublk.told, 1, "told once, at the force")
		assert.True(t, ublk.toldAt[0].Equal(rep.ForcedAt))
		assert.True(t, ublk.told[0].Equal(rep.ForcedAt.Add(3*time.Second)), "told its reserve from the force: %v", ublk.told[0].Sub(rep.ForcedAt))
		assert.True(t, ublk.ended.Equal(ublk.told[0]), "its context ended there: %v", ublk.ended.Sub(rep.ForcedAt))
		assert.Contains(t, p.Error, ErrForced.Error())
	})
}

// Forced before the step began (a second Ctrl-C during the preserve phase),
// the step's reserve is its context's deadline, which Run reads and lays
// its work out in. Before, its context had the hour's window as its
// deadline and was cancelled 3 s in: the ublk teardown planned its control
// fallback and kill at the end of the hour.
func TestStepBegunForcedHasItsReserveForDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(3 * time.Second), Critical: true}}
		f := newFixture(t, fixtureOpts{grace: time.Hour, steps: []Step{ublk}})
		f.d.Force()
		rep := f.d.Shutdown(context.Background())
		p := rep.Phase("ublk")
		require.NotNil(t, p)

		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		assert.Equal(t, 3*time.Second, ublk.planned.Sub(ublk.began), "its reserve is its deadline")
		assert.Empty(t, ublk.told, "nothing moved while it ran")
		assert.True(t, ublk.ended.Equal(ublk.planned))
		assert.Equal(t, TimedOut, p.Result)
		assert.Contains(t, p.Error, ErrForced.Error())
	})
}

//	SIGTERM        the critical "ublk" step starts at once (no sandboxes),
//	               its window the manifest's 60 s less the margin; its Run
//	               is called, and has not yet registered as running (the
//	               span, the run's state: ublk's Stop before cur.Store)
//	+100 ms        a deletion read lands there: SIGKILL at +3 s; the step
//	               is told its new deadline (Tighten), which a step not yet
//	               running drops, as its contract says
//	               the step registers and reads ctx's deadline to plan
//
// Before, ctx's deadline was still the 60 s window's: the step planned its
// late stages (ublk's control fallback and kill) near the end of 60 s, was
// told nothing more, and its context was cancelled at +3 s with none of
// them run. ctx's deadline is now the step's latest, so a Run that reads
// it after it can be told misses no move.
func TestStepMovedBeforeItRegistersReadsItsNewDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second), Critical: true}}
		var f *fixture
		ublk.entering = func() {
			time.Sleep(100 * time.Millisecond)
			f.budget.Tighten(f.budget.State().SIGTERM.Add(3 * time.Second)) // the deletion read, from its own goroutine
			synctest.Wait()                                                 // followBudget has seen it, and told the step
		}
		f = newFixture(t, fixtureOpts{grace: 60 * time.Second, steps: []Step{ublk}})
		rep := f.d.Shutdown(context.Background())
		sigterm := rep.Budget.SIGTERM
		require.True(t, rep.Budget.Kill.Equal(sigterm.Add(3*time.Second)), "SIGKILL at +3 s, not %v", rep.Budget.Kill.Sub(sigterm))
		p := rep.Phase("ublk")
		require.NotNil(t, p)
		require.Less(t, p.Deadline.Sub(sigterm), 3*time.Second, "the step's window ends before the new SIGKILL")

		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		assert.True(t, ublk.planned.Equal(p.Deadline), "the step planned in its new deadline %v, not %v",
			p.Deadline.Sub(sigterm), ublk.planned.Sub(sigterm))
		assert.True(t, ublk.ended.Equal(p.Deadline), "its context ended there: %v", ublk.ended.Sub(sigterm))
	})
}

//	SIGTERM    the critical "ublk" step starts at once (no sandboxes), its
//	           window the hour's grace less the margin; its Run is called,
//	           and has not yet registered as running
//	+1 s       Force there: the step gets its 3 s reserve from now, and is
//	           told so (Tighten), which a step not yet running drops
//	           the step registers and reads ctx's deadline to plan
//
// Before, ctx's deadline was the hour's: the step planned at the end of the
// hour, and its context was cancelled at +4 s.
func TestStepForcedBeforeItRegistersReadsItsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(3 * time.Second), Critical: true}}
		var f *fixture
		ublk.entering = func() {
			time.Sleep(time.Second)
			f.d.Force()
			synctest.Wait()
		}
		f = newFixture(t, fixtureOpts{grace: time.Hour, steps: []Step{ublk}})
		rep := f.d.Shutdown(context.Background())
		p := rep.Phase("ublk")
		require.NotNil(t, p)

		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		assert.True(t, ublk.planned.Equal(rep.ForcedAt.Add(3*time.Second)), "the step planned in its reserve from the force, not %v after it",
			ublk.planned.Sub(rep.ForcedAt))
		assert.True(t, ublk.ended.Equal(ublk.planned), "its context ended there: %v", ublk.ended.Sub(rep.ForcedAt))
		assert.Contains(t, p.Error, ErrForced.Error())
	})
}

// A phase's PhaseReport.Short is what the budget left it less than its
// reserve, as its doc says: a step whose deadline a deletion read moved
// (SIGTERM, a 5 s critical step, a 3 s deletion landing at +100 ms: 1.5 s
// to its new deadline) is 3.5 s short. Before, its Deadline moved and its
// Short stayed 0.
func TestStepSqueezedByTheBudgetReportsItsShortfall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pod := deletedPodReadLate(t, 3*time.Second, 100*time.Millisecond)
		ublk := &tighteningStep{phase: deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(5 * time.Second), Critical: true}}
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, steps: []Step{ublk},
			edit: func(c *Config) { c.Pod = pod }})
		rep := f.d.Shutdown(context.Background())
		p := rep.Phase("ublk")
		require.NotNil(t, p)
		ublk.mu.Lock()
		defer ublk.mu.Unlock()
		require.Len(t, ublk.told, 1)
		assert.True(t, p.Deadline.Equal(ublk.told[0]), "the deadline it was cut to")
		assert.Equal(t, 5*time.Second-p.Deadline.Sub(p.Start), p.Short, "its 5 s reserve, less what it had: %v", p.Deadline.Sub(p.Start))
	})
}
