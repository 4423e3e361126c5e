package deadline_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// shorts returns each window's Short.
func shorts(ws []deadline.Window) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.Short
	}
	return out
}

// hards returns each window's Hard.
func hards(ws []deadline.Window) []time.Time {
	out := make([]time.Time, len(ws))
	for i, w := range ws {
		out[i] = w.Hard
	}
	return out
}

// offsets returns each window's deadline as an offset from base.
func offsets(base time.Time, ws []deadline.Window) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.Deadline.Sub(base)
	}
	return out
}

func newBudget(t *testing.T, grace time.Duration) *deadline.Budget {
	t.Helper()
	b, err := deadline.New(grace, deadline.Config{})
	require.NoError(t, err)
	return b
}

func newPlan(t *testing.T, b *deadline.Budget, phases ...deadline.Phase) *deadline.Plan {
	t.Helper()
	p, err := deadline.NewPlan(b, phases...)
	require.NoError(t, err)
	return p
}

// TestPlanPhaseDeadlinesAreBudgetDeadlineMinusLaterReserves:
//
//	T0 ─ drain ─ 2930 ─ preserve (600) ─ 3530 ─ teardown (60) ─ 3590 ─ exit (5) ─ 3595 = Deadline ─ 3600 SIGKILL
func TestPlanPhaseDeadlinesAreBudgetDeadlineMinusLaterReserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(600 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(60 * time.Second)},
			deadline.Phase{Name: "exit", Reserve: deadline.Fixed(5 * time.Second)},
		)
		assert.Equal(t, []string{"drain", "preserve", "teardown", "exit"}, p.Phases())
		assert.Same(t, b, p.Budget())
		ws := p.Windows("")
		assert.Equal(t, []time.Duration{2930 * time.Second, 3530 * time.Second, 3590 * time.Second, 3595 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 600 * time.Second, 60 * time.Second, 5 * time.Second},
			[]time.Duration{ws[0].Reserve, ws[1].Reserve, ws[2].Reserve, ws[3].Reserve})
		for i, w := range ws {
			assert.Zero(t, w.Short, w.Name)
			assert.Equal(t, w.Deadline, p.Deadline(w.Name), "the deadline does not depend on when the phase starts")
			assert.Equal(t, t0.Add(3595*time.Second), w.Hard, "%s: no critical phase, work may run to the budget's deadline", w.Name)
			if i > 0 {
				assert.Equal(t, ws[i-1].Deadline, w.Start, "%s starts where %s ends", w.Name, ws[i-1].Name)
			}
		}
		assert.Equal(t, ws[0], p.Window("drain"))
		later := p.Windows("teardown") // as if the teardown started now
		assert.Equal(t, offsets(t0, ws[2:]), offsets(t0, later), "Windows(name) starts at name")
		assert.Equal(t, t0, later[0].Start)
		assert.Zero(t, p.Shortfall())
	})
}

// TestPlanReserveFollowsLiveSandboxCount: the preserve reserve is
// running x estimate / concurrency, re-evaluated on every call, so the drain
// (preStop) deadline moves later as sandboxes finish.
func TestPlanReserveFollowsLiveSandboxCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		var running atomic.Int64
		pauses := deadline.NewEstimator(10 * time.Second)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Work(func() int { return int(running.Load()) }, pauses, func() int { return 4 })},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(30 * time.Second)},
		)
		for _, tc := range []struct {
			running int64
			drain   time.Duration // offset from T0
		}{
			{400, 3595*time.Second - 30*time.Second - 100*10*time.Second},
			{41, 3595*time.Second - 30*time.Second - 11*10*time.Second}, // ceil(41/4) = 11 rounds
			{40, 3595*time.Second - 30*time.Second - 10*10*time.Second},
			{1, 3595*time.Second - 30*time.Second - 10*time.Second},
			{0, 3595*time.Second - 30*time.Second},
		} {
			running.Store(tc.running)
			assert.Equal(t, tc.drain, p.Deadline("drain").Sub(t0), "running=%d", tc.running)
			assert.Equal(t, t0.Add(3565*time.Second), p.Deadline("preserve"), "running=%d", tc.running)
		}
		// The estimate moves the reserve too: pauses observed at 20 s double it.
		running.Store(40)
		pauses.Observe(20 * time.Second)
		assert.Equal(t, 3595*time.Second-30*time.Second-10*20*time.Second, p.Deadline("drain").Sub(t0))
	})
}

// TestPlanUnusedTimeFlowsToNextPhase: the preStop (drain) phase ends early at
// 100 s; SIGTERM follows. Preserve keeps its absolute deadline, so it gets
// the 2830 s drain did not use on top of its own 600 s reserve.
func TestPlanUnusedTimeFlowsToNextPhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(600 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(60 * time.Second)},
		)
		drainCtx, cancel := p.Context(t.Context(), "drain")
		time.Sleep(100 * time.Second) // every sandbox finished early
		require.NoError(t, drainCtx.Err(), "drain ended before its deadline")
		cancel()
		b.OnSIGTERM(time.Now())
		ctx, cancel := p.Context(t.Context(), "preserve")
		defer cancel()
		dl, _ := ctx.Deadline()
		assert.Equal(t, t0.Add(3535*time.Second), dl)
		assert.Equal(t, 3435*time.Second, time.Until(dl), "preserve gets the drain's unused time")
	})
}

// TestPlanShortBudgetIsSharedInProportionToReserves: a 60 s budget (55 s
// after the margin) cannot hold 40 s + 70 s of reserves. Nobody wins: each
// phase gets 55/110 of its reserve, and the phase with no reserve (the
// preStop wait) gets no time at all.
//
//	T0 = drain ─ preserve 20 of 40 ─ 20 s ─ teardown 35 of 70 ─ 55 s = Deadline
func TestPlanShortBudgetIsSharedInProportionToReserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 60*time.Second)
		b.OnPreStop(t0)
		teardown := 70 * time.Second
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(40 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: func() time.Duration { return teardown }},
		)
		ws := p.Windows("")
		assert.Equal(t, []time.Duration{0, 20 * time.Second, 55 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 20 * time.Second, 35 * time.Second}, shorts(ws))
		assert.Equal(t, 55*time.Second, p.Shortfall())
		assert.Equal(t, p.Shortfall(), p.ShortfallFrom("drain"), "at T0 both measure the same")

		teardown = 60 * time.Second // 40:60
		ws = p.Windows("")
		assert.Equal(t, []time.Duration{0, 22 * time.Second, 55 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 18 * time.Second, 27 * time.Second}, shorts(ws))
		assert.Equal(t, 45*time.Second, p.Shortfall())

		teardown = 15 * time.Second // exactly fits: later reserves are honoured again
		ws = p.Windows("")
		assert.Equal(t, []time.Duration{0, 40 * time.Second, 55 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 0, 0}, shorts(ws))
		assert.Zero(t, p.Shortfall())
	})
}

// TestPlanCriticalReserveComesFirst: the same budget with the teardown
// critical. Its 30 s come first and preserve gets the 25 s left; preserve's
// work must be over where the teardown's window begins. A critical reserve
// beyond the whole budget takes all of it.
func TestPlanCriticalReserveComesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 60*time.Second)
		b.OnPreStop(t0)
		teardown := 30 * time.Second
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(40 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: func() time.Duration { return teardown }, Critical: true},
		)
		ws := p.Windows("")
		assert.Equal(t, []time.Duration{0, 25 * time.Second, 55 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 15 * time.Second, 0}, shorts(ws))
		assert.Equal(t, []time.Time{t0.Add(25 * time.Second), t0.Add(25 * time.Second), t0.Add(55 * time.Second)}, hards(ws))

		teardown = 70 * time.Second
		ws = p.Windows("")
		assert.Equal(t, []time.Duration{0, 0, 55 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 40 * time.Second, 15 * time.Second}, shorts(ws))
		assert.Equal(t, []time.Time{t0, t0, t0.Add(55 * time.Second)}, hards(ws))
	})
}

// TestPlanContextsFireExactlyAtPhaseDeadlines runs the whole AgentENV
// timeline at full scale in virtual time.
func TestPlanContextsFireExactlyAtPhaseDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(540 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(60 * time.Second)},
		)
		want := map[string]time.Duration{"drain": 2995 * time.Second, "preserve": 3535 * time.Second, "teardown": 3595 * time.Second}
		for _, name := range p.Phases() {
			if name == "preserve" {
				b.OnSIGTERM(time.Now()) // the preStop hook returned at the drain deadline
			}
			ctx, cancel := p.Context(t.Context(), name)
			dl, ok := ctx.Deadline()
			require.True(t, ok, name)
			assert.Equal(t, t0.Add(want[name]), dl, name)
			<-ctx.Done()
			assert.Equal(t, t0.Add(want[name]), time.Now(), "%s fired at the wrong time", name)
			assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded, name)
			cancel()
		}
	})
}

// TestPlanAfterOverrunTheLastSecondGoesByReserve: a hook that overran
// leaves SIGTERM + 2 s, of which the 1 s margin leaves 1 s. Preserve
// reserves nothing and gets nothing; the teardown gets the second, 59 s
// short of its reserve.
//
//	T0 ── preStop overruns ── 3600 s SIGTERM = preserve's deadline ── 3601 s teardown's = Deadline ── 3602 s SIGKILL
func TestPlanAfterOverrunTheLastSecondGoesByReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "preserve"},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(60 * time.Second)},
		)
		time.Sleep(3600 * time.Second)
		b.OnSIGTERM(time.Now())
		ws := p.Windows("preserve")
		assert.Equal(t, []time.Duration{3600 * time.Second, 3601 * time.Second}, offsets(t0, ws))
		assert.Equal(t, []time.Duration{0, 59 * time.Second}, shorts(ws))
		assert.Equal(t, 59*time.Second, p.ShortfallFrom("preserve"))
		preserve, cancel := p.Context(t.Context(), "preserve")
		defer cancel()
		assert.ErrorIs(t, preserve.Err(), context.DeadlineExceeded)
		teardown, cancel := p.Context(t.Context(), "teardown")
		defer cancel()
		<-teardown.Done()
		assert.Equal(t, t0.Add(3601*time.Second), time.Now())
	})
}

func TestPlanDeadlineUnknownPhasePanics(t *testing.T) {
	b := newBudget(t, time.Hour)
	p := newPlan(t, b, deadline.Phase{Name: "drain"})
	assert.PanicsWithValue(t, `deadline: plan has no phase "preserve"`, func() { p.Deadline("preserve") })
	assert.PanicsWithValue(t, `deadline: plan has no phase "preserve"`, func() { p.Window("preserve") })
	assert.PanicsWithValue(t, `deadline: plan has no phase "preserve"`, func() { p.Windows("preserve") })
	assert.PanicsWithValue(t, `deadline: plan has no phase "preserve"`, func() { p.ShortfallFrom("preserve") })
	assert.Panics(t, func() { p.Context(t.Context(), "preserve") })
	assert.Len(t, p.Windows(""), 1, `"" is the first phase, not a name`)
}

func TestNewPlanBadInputNamesTheField(t *testing.T) {
	b := newBudget(t, time.Hour)
	tests := []struct {
		name   string
		budget *deadline.Budget
		phases []deadline.Phase
		field  string
	}{
		{"nil budget", nil, []deadline.Phase{{Name: "drain"}}, "budget"},
		{"no phases", b, nil, "phases"},
		{"empty name", b, []deadline.Phase{{Name: "drain"}, {Name: ""}}, "phases[1].Name"},
		{"duplicate name", b, []deadline.Phase{{Name: "drain"}, {Name: "exit"}, {Name: "drain"}}, `phases[2].Name "drain" duplicates phases[0].Name`},
		{"negative fixed reserve", b, []deadline.Phase{{Name: "drain"}, {Name: "teardown", Reserve: deadline.Fixed(-time.Second)}}, "phases[1].Reserve"},
		{"negative max", b, []deadline.Phase{{Name: "drain"}, {Name: "gate", Max: -time.Second}}, "phases[1].Max"},
	}
	for _, tc := range tests {
		p, err := deadline.NewPlan(tc.budget, tc.phases...)
		assert.Nil(t, p, tc.name)
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), tc.field, tc.name)
		}
	}
}

func TestPlanLiveReserveTurningNegativeCountsAsZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 100*time.Second)
		b.OnSIGTERM(t0) // no preStop wait: a is a phase after SIGTERM
		r := 10 * time.Second
		p := newPlan(t, b, deadline.Phase{Name: "a"}, deadline.Phase{Name: "b", Reserve: func() time.Duration { return r }})
		assert.Equal(t, t0.Add(85*time.Second), p.Deadline("a"))
		r = -time.Hour
		assert.Equal(t, t0.Add(95*time.Second), p.Deadline("a"))
		assert.Zero(t, p.Windows("")[1].Reserve)
	})
}

func TestWork(t *testing.T) {
	est := deadline.NewEstimator(3 * time.Second)
	n := func(v int) func() int { return func() int { return v } }
	tests := []struct {
		name string
		r    deadline.Reserve
		want time.Duration
	}{
		{"ceil rounds", deadline.Work(n(9), est, n(4)), 9 * time.Second},
		{"exact rounds", deadline.Work(n(8), est, n(4)), 6 * time.Second},
		{"fewer items than workers", deadline.Work(n(1), est, n(16)), 3 * time.Second},
		{"no items", deadline.Work(n(0), est, n(4)), 0},
		{"negative items", deadline.Work(n(-3), est, n(4)), 0},
		{"nil items", deadline.Work(nil, est, n(4)), 0},
		{"zero parallel counts as 1", deadline.Work(n(5), est, n(0)), 15 * time.Second},
		{"nil parallel counts as 1", deadline.Work(n(5), est, nil), 15 * time.Second},
		{"nil estimator", deadline.Work(n(5), nil, n(1)), 0},
		{"saturates", deadline.Work(n(math.MaxInt), deadline.NewEstimator(time.Hour), n(1)), math.MaxInt64},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.r(), tc.name)
	}
	assert.Equal(t, 7*time.Second, deadline.Fixed(7*time.Second)())
}

func TestPlanConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		var running atomic.Int64
		running.Store(1000)
		est := deadline.NewEstimator(time.Second)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Work(func() int { return int(running.Load()) }, est, func() int { return 8 })},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(time.Minute)},
		)
		done := make(chan struct{})
		go func() {
			b.OnPreStop(t0)
			for range 1000 {
				running.Add(-1)
				est.Observe(2 * time.Second)
			}
			b.OnSIGTERM(time.Now())
			close(done)
		}()
		for range 1000 {
			ws := p.Windows("")
			for i := 1; i < len(ws); i++ {
				if ws[i].Deadline.Before(ws[i-1].Deadline) || ws[i].Hard.Before(ws[i].Deadline) {
					t.Fatalf("windows out of order: %+v", ws)
				}
			}
			_ = p.Window("preserve")
			_ = p.Shortfall()
		}
		<-done
		synctest.Wait()
	})
}

// TestPlanShortfallFromMeasuresWhatIsLeftNow: the whole plan fitted at T0,
// but a preStop hook that overran left 2 s after SIGTERM for 60 s of work.
func TestPlanShortfallFromMeasuresWhatIsLeftNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		b := newBudget(t, 3600*time.Second)
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "drain"},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(50 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(10 * time.Second)},
		)
		assert.Zero(t, p.ShortfallFrom("preserve"))
		time.Sleep(3500 * time.Second) // 95 s left before the deadline
		assert.Zero(t, p.ShortfallFrom("preserve"))
		time.Sleep(50 * time.Second) // 45 s left
		assert.Equal(t, 15*time.Second, p.ShortfallFrom("preserve"))
		assert.Zero(t, p.ShortfallFrom("teardown"))
		time.Sleep(50 * time.Second) // the hook overran
		b.OnSIGTERM(time.Now())      // 2 s to SIGKILL, 1 s to the deadline
		assert.Equal(t, 59*time.Second, p.ShortfallFrom("preserve"))
		assert.Equal(t, 9*time.Second, p.ShortfallFrom("teardown"))
		assert.Zero(t, p.Shortfall(), "measured from T0 the plan still fits")
		assert.Panics(t, func() { p.ShortfallFrom("exit") })
	})
}

// Fault: the zero Plan (not made by NewPlan) panicked with a nil
// dereference in Shortfall and Windows(""), and its methods that name a
// phase panicked "plan has no phase", true of every name but silent on
// why. A zero Plan now has no phase and no reserve: Shortfall is zero,
// Windows("") empty, and a phase's name panics as documented for an
// unknown one, saying the Plan was not made by NewPlan. docs/faults.md
// row 242.
func TestZeroPlanHasNoPhaseAndSaysWhy(t *testing.T) {
	var p deadline.Plan
	assert.Nil(t, p.Budget())
	assert.Empty(t, p.Phases())
	assert.Zero(t, p.Shortfall())
	assert.Empty(t, p.Windows(""))
	const want = `deadline: plan has no phase "preserve": a zero Plan, not made by deadline.NewPlan, has none`
	assert.PanicsWithValue(t, want, func() { p.Deadline("preserve") })
	assert.PanicsWithValue(t, want, func() { p.Window("preserve") })
	assert.PanicsWithValue(t, want, func() { p.Windows("preserve") })
	assert.PanicsWithValue(t, want, func() { p.ShortfallFrom("preserve") })
	assert.PanicsWithValue(t, want, func() { p.Context(t.Context(), "preserve") })
}

// TestWindowsPreviewIsWhatEachPhaseGetsWhenAMaxCutsOne: 16 s to the
// budget's deadline for 31 s of reserves, the gate cut by its Max at 2 s:
//
//	T0 ─ gate (Max 2) ─ 2 ─ preserve ─ 8.5 ─ teardown ─ 15 ─ exit (critical) ─ 16 = Deadline
//
// Windows, laid out at T0, is what each phase gets when it starts and asks
// for its Window: the 3 s the gate's Max leaves are shared by preserve and
// teardown as Window shares them at 2 s, not all given to preserve.
// Before, the layout shared the time once, from T0 (preserve until 10,
// 5 s short), while preserve's own Window at 2 s said 8.5 (3.5 s short).
func TestWindowsPreviewIsWhatEachPhaseGetsWhenAMaxCutsOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(18*time.Second, deadline.Config{Margin: 2 * time.Second})
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		p := newPlan(t, b,
			deadline.Phase{Name: "gate", Reserve: deadline.Fixed(10 * time.Second), Max: 2 * time.Second},
			deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(10 * time.Second)},
			deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(10 * time.Second)},
			deadline.Phase{Name: "exit", Reserve: deadline.Fixed(time.Second), Critical: true},
		)
		preview := p.Windows("")
		s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
		assert.Equal(t, []time.Duration{s(2), s(8.5), s(15), s(16)}, offsets(t0, preview))
		assert.Equal(t, []time.Duration{s(5), s(3.5), s(3.5), 0}, shorts(preview))
		for _, w := range preview {
			time.Sleep(time.Until(w.Start)) // the phase before ran to its deadline
			assert.Equal(t, w, p.Window(w.Name), "%s: the preview at T0 and the window the phase gets when it starts", w.Name)
		}
	})
}
