package deadline_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
)

// drainPlan is the plan a drain.Drainer builds, with reserves chosen so that
// every share comes out in whole milliseconds: the preStop wait, the gate
// (waits at most gateMax for admitted requests), the preserve phase (live
// sandboxes x 3 s / 4 at a time), the ublk teardown (critical, 600 ms) and
// the HTTP server's shutdown (1 s).
func drainPlan(running *atomic.Int64, gateMax time.Duration) []deadline.Phase {
	return []deadline.Phase{
		{Name: "drain"},
		{Name: "gate", Max: gateMax},
		{Name: "preserve", Reserve: deadline.Work(func() int { return int(running.Load()) },
			deadline.NewEstimator(3*time.Second), func() int { return 4 })},
		{Name: "ublk", Reserve: deadline.Fixed(600 * time.Millisecond), Critical: true},
		{Name: "http", Reserve: deadline.Fixed(time.Second)},
	}
}

// timeline is what happens to a drain plan, in order, at offsets from T0.
type timeline struct {
	b       *deadline.Budget
	t0      time.Time
	running *atomic.Int64
	wake    chan struct{} // tells the preStop wait the live count moved
}

func atSIGTERM() func(*timeline) { return func(tl *timeline) { tl.b.OnSIGTERM(time.Now()) } }

func atTighten(kill time.Duration) func(*timeline) {
	return func(tl *timeline) { tl.b.Tighten(tl.t0.Add(kill)) }
}

func setRunning(n int64) func(*timeline) {
	return func(tl *timeline) {
		tl.running.Store(n)
		select {
		case tl.wake <- struct{}{}:
		default:
		}
	}
}

// preStopWait is the drain phase: it waits until the drain deadline,
// re-reading it whenever the budget or the live count changes, and returns
// when it ended.
func preStopWait(tl *timeline, p *deadline.Plan) time.Time {
	for {
		changed := tl.b.Changed()
		wait := time.Until(p.Deadline("drain"))
		if wait <= 0 {
			return time.Now()
		}
		timer := time.NewTimer(wait)
		select {
		case <-changed:
		case <-tl.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// TestPlanShortBudgetRuleAtEveryPhase runs a drain plan through three
// terminations and checks the window every phase receives when it starts,
// as the phases run in order: its Deadline, its Hard deadline and how
// short it is of its reserve. With ms = milliseconds after T0:
//
// The kubelet's 2 s after an overrunning preStop hook (grace 30 s, margin 3 s):
//
//	T0 ── drain until 19 400, then 22 400 (4 sandboxes left) ── the hook overruns ── 30 500 SIGTERM:
//	      SIGKILL 32 500, margin cut to 1 s, Deadline 31 500: 1 s for 4.6 s of reserves
//	30 500 gate ─ 30 500 preserve (300 of 3 000) ─ 30 800 ublk (600, critical first) ─ 31 400 http (100 of 1 000) ─ 31 500
//
// A grace cut to 8 s by the deletionTimestamp during the preStop wait (grace 3600 s):
//
//	T0 ── 2 000 Tighten: SIGKILL 8 000, Deadline 4 000; 2 s for 4.6 s: the preStop wait ends now
//	2 600 SIGTERM: SIGKILL stays at the deletionTimestamp, 8 000; margin 2.7 s (half), Deadline 5 300
//	2 600 gate ─ 2 600 preserve (1 575 of 3 000) ─ done at 3 500 ─ ublk (fits again) ─ 4 000 http ─ 5 300
//
// Ample time (grace 60 s, margin 5 s):
//
//	T0 ── drain until 47 400, then 50 400 ── SIGTERM 50 400: SIGKILL 60 400, Deadline 55 400
//	50 400 gate (Max 200) ─ 50 600 preserve ─ done at 52 000 ─ ublk ─ 52 500 http ─ 55 400
func TestPlanShortBudgetRuleAtEveryPhase(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	type step struct {
		at    time.Duration   // since T0
		event func(*timeline) // what happens at that moment, if anything
		phase string          // the phase that starts (or, for drain, re-reads its window)
		dl    time.Duration   // its Deadline, since T0
		hard  time.Duration   // its Hard deadline, since T0
		short time.Duration   // its Short
	}
	tests := []struct {
		name      string
		grace     time.Duration
		gateMax   time.Duration
		running   int64
		drainEnds time.Duration // when the preStop wait returns, since T0
		steps     []step
	}{
		{
			name: "kubelet's 2 s after an overrunning preStop hook", grace: 30 * time.Second, gateMax: 2 * time.Second,
			running: 8, drainEnds: ms(22400),
			steps: []step{
				{at: 0, phase: "drain", dl: ms(19400), hard: ms(25400)},
				{at: ms(10000), event: setRunning(4), phase: "drain", dl: ms(22400), hard: ms(25400)},
				{at: ms(30500), event: atSIGTERM(), phase: "gate", dl: ms(30500), hard: ms(30800)},
				{at: ms(30500), phase: "preserve", dl: ms(30800), hard: ms(30800), short: ms(2700)},
				{at: ms(30800), phase: "ublk", dl: ms(31400), hard: ms(31500)},
				{at: ms(31400), phase: "http", dl: ms(31500), hard: ms(31500), short: ms(900)},
			},
		},
		{
			name: "grace cut by the deletionTimestamp during the preStop wait", grace: 3600 * time.Second, gateMax: 2 * time.Second,
			running: 4, drainEnds: ms(2000),
			steps: []step{
				{at: 0, phase: "drain", dl: ms(3590400), hard: ms(3593400)},
				// The deletion leaves 8 s: the default margin follows it (1.5 s, not
				// the manifest's 5 s), SIGKILL at T0 + 8 s, the deadline at 6.5 s.
				{at: ms(2000), event: atTighten(8 * time.Second), phase: "drain", dl: ms(2000), hard: ms(4925)},
				{at: ms(2600), event: atSIGTERM(), phase: "gate", dl: ms(2600), hard: ms(5075)},
				{at: ms(2600), phase: "preserve", dl: ms(5075), hard: ms(5075), short: ms(525)},
				{at: ms(3500), event: setRunning(0), phase: "ublk", dl: ms(5500), hard: ms(6500)},
				{at: ms(4000), phase: "http", dl: ms(6500), hard: ms(6500)},
			},
		},
		{
			name: "ample time", grace: 60 * time.Second, gateMax: ms(200),
			running: 8, drainEnds: ms(50400),
			steps: []step{
				{at: 0, phase: "drain", dl: ms(47400), hard: ms(53400)},
				{at: ms(10000), event: setRunning(4), phase: "drain", dl: ms(50400), hard: ms(53400)},
				{at: ms(50400), event: atSIGTERM(), phase: "gate", dl: ms(50600), hard: ms(53800)},
				{at: ms(50600), phase: "preserve", dl: ms(53800), hard: ms(53800)},
				{at: ms(52000), event: setRunning(0), phase: "ublk", dl: ms(54400), hard: ms(55400)},
				{at: ms(52500), phase: "http", dl: ms(55400), hard: ms(55400)},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tl := &timeline{b: newBudget(t, tc.grace), t0: time.Now(), running: new(atomic.Int64), wake: make(chan struct{}, 1)}
				tl.running.Store(tc.running)
				phases := drainPlan(tl.running, tc.gateMax)
				p := newPlan(t, tl.b, phases...)
				index := make(map[string]int)
				for i, ph := range phases {
					index[ph.Name] = i
				}
				tl.b.OnPreStop(tl.t0)
				drainEnded := make(chan time.Time, 1)
				go func() { drainEnded <- preStopWait(tl, p) }()

				for _, s := range tc.steps {
					require.False(t, time.Now().After(tl.t0.Add(s.at)), "steps out of order at %v", s.at)
					time.Sleep(time.Until(tl.t0.Add(s.at)))
					synctest.Wait() // a preStop wait that ends now ends before the event
					if s.event != nil {
						s.event(tl)
						synctest.Wait() // let the preStop wait see it
					}
					now, i := time.Now(), index[s.phase]
					w := p.Window(s.phase)
					where := s.phase + " at T0 + " + s.at.String()
					assert.Equal(t, s.phase, w.Name, where)
					assert.Equal(t, now, w.Start, "%s: a window starts when it is asked for", where)
					assert.Equal(t, s.dl, w.Deadline.Sub(tl.t0), "%s: Deadline", where)
					assert.Equal(t, s.hard, w.Hard.Sub(tl.t0), "%s: Hard", where)
					assert.Equal(t, s.short, w.Short, "%s: Short", where)
					assert.Equal(t, reserveOf(phases[i]), w.Reserve, "%s: Reserve", where)

					// The same window from every entry point.
					ws := p.Windows(s.phase)
					assert.Equal(t, w, ws[0], where)
					assert.Equal(t, deadline.Split(now, tl.b.Deadline(), phases[i:]...), ws, "%s: Windows is Split from now", where)
					assert.Equal(t, tl.b.Deadline(), ws[len(ws)-1].Deadline, "%s: the last phase ends at the budget's deadline", where)
					assert.Equal(t, w.Deadline, p.Deadline(s.phase), where)
					ctx, cancel := p.Context(t.Context(), s.phase)
					dl, _ := ctx.Deadline()
					assert.Equal(t, w.Deadline, dl, where)
					cancel()
					short := false
					for _, w := range ws {
						short = short || w.Short > 0
					}
					assert.Equal(t, short, p.ShortfallFrom(s.phase) > 0, "%s: ShortfallFrom is positive exactly when the time is shared", where)
				}
				assert.Equal(t, tc.drainEnds, (<-drainEnded).Sub(tl.t0), "the preStop wait ended at the wrong time")
			})
		})
	}
}

// TestSplit pins the rule on its own: later reserves are honoured while
// they fit with the first phase's own; otherwise critical phases get
// theirs first and the rest is shared in proportion to the reserves,
// rounding down, with what rounding leaves to the first phase. A later
// reserve that fits on its own is shared too when the first phase's does
// not (the package doc said it was honoured: docs/faults.md row 1020).
func TestSplit(t *testing.T) {
	s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	fixed := func(name string, r time.Duration) deadline.Phase {
		return deadline.Phase{Name: name, Reserve: deadline.Fixed(r)}
	}
	critical := func(name string, r time.Duration) deadline.Phase {
		return deadline.Phase{Name: name, Reserve: deadline.Fixed(r), Critical: true}
	}
	type want struct{ start, deadline, hard, short time.Duration } // since start
	tests := []struct {
		name   string
		end    time.Duration // since start
		phases []deadline.Phase
		want   []want
	}{
		{"reserves fit: each phase ends where the later reserves begin", s(10),
			[]deadline.Phase{{Name: "z"}, fixed("a", s(2)), fixed("b", s(3))},
			[]want{{0, s(5), s(10), 0}, {s(5), s(7), s(10), 0}, {s(7), s(10), s(10), 0}}},
		{"reserves fit exactly", s(10),
			[]deadline.Phase{fixed("a", s(4)), fixed("b", s(6))},
			[]want{{0, s(4), s(10), 0}, {s(4), s(10), s(10), 0}}},
		{"a later reserve that fits alone is shared when the phase's own does not", s(10),
			[]deadline.Phase{fixed("preserve", s(8)), fixed("exit", s(5))},
			[]want{{0, 6153846154, s(10), 1846153846}, {6153846154, s(10), s(10), 1153846154}}},
		{"a critical phase keeps its reserve before a later one that fits alone", s(8),
			[]deadline.Phase{critical("teardown", s(6)), fixed("exit", s(4))},
			[]want{{0, s(6), s(8), 0}, {s(6), s(8), s(8), s(2)}}},
		{"critical first, the rest in proportion, no reserve no time", s(10),
			[]deadline.Phase{{Name: "z"}, fixed("a", s(1)), fixed("b", s(3)), critical("c", s(6)), fixed("d", s(4))},
			[]want{{0, 0, s(2), 0}, {0, s(0.5), s(2), s(0.5)}, {s(0.5), s(2), s(2), s(1.5)}, {s(2), s(8), s(10), 0}, {s(8), s(10), s(10), s(2)}}},
		{"critical phases share when even they do not fit", s(10),
			[]deadline.Phase{fixed("a", s(2)), critical("c1", s(8)), fixed("b", s(1)), critical("c2", s(12))},
			[]want{{0, 0, 0, s(2)}, {0, s(4), s(4), s(4)}, {s(4), s(4), s(4), s(1)}, {s(4), s(10), s(10), s(6)}}},
		{"rounding goes to the first phase", s(1),
			[]deadline.Phase{fixed("a", s(1)), fixed("b", s(1)), fixed("c", s(1))},
			[]want{{0, 333333334, s(1), 666666666}, {333333334, 666666667, s(1), 666666667}, {666666667, s(1), s(1), 666666667}}},
		{"end before start counts as start", -s(1),
			[]deadline.Phase{fixed("a", s(1)), critical("c", s(2)), {Name: "z"}},
			[]want{{0, 0, 0, s(1)}, {0, 0, 0, s(2)}, {0, 0, 0, 0}}},
		{"nil and negative reserves and a negative Max count as zero", s(10),
			[]deadline.Phase{{Name: "a"}, {Name: "b", Reserve: deadline.Fixed(-s(1)), Max: -s(1)}},
			[]want{{0, s(10), s(10), 0}, {s(10), s(10), s(10), 0}}},
	}
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		ws := deadline.Split(start, start.Add(tc.end), tc.phases...)
		require.Len(t, ws, len(tc.phases), tc.name)
		for i, w := range ws {
			got := want{w.Start.Sub(start), w.Deadline.Sub(start), w.Hard.Sub(start), w.Short}
			assert.Equal(t, tc.want[i], got, "%s: %s (start, deadline, hard, short)", tc.name, w.Name)
			assert.Equal(t, tc.phases[i].Name, w.Name, tc.name)
			assert.Equal(t, reserveOf(tc.phases[i]), w.Reserve, tc.name)
		}
	}
}

// TestSplitMaxCutsOnlyItsOwnPhase: Max ends a phase that long after its
// start and never moves a deadline later; the later phases share the time
// it leaves as they would when they start (see
// TestWindowsPreviewIsWhatEachPhaseGetsWhenAMaxCutsOne), the Short of the
// cut phase still measures the time it was given, and its Hard still lets
// started work run on.
func TestSplitMaxCutsOnlyItsOwnPhase(t *testing.T) {
	start := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	at := func(ws []deadline.Window) []time.Duration { return offsets(start, ws) }

	ws := deadline.Split(start, start.Add(10*time.Second),
		deadline.Phase{Name: "gate", Max: time.Second},
		deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(3 * time.Second)},
	)
	assert.Equal(t, []time.Duration{time.Second, 10 * time.Second}, at(ws))
	assert.Equal(t, start.Add(10*time.Second), ws[0].Hard)
	assert.Equal(t, []time.Duration{0, 0}, shorts(ws))

	ws = deadline.Split(start, start.Add(10*time.Second),
		deadline.Phase{Name: "gate", Max: time.Minute}, // longer than its window: no effect
		deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(3 * time.Second)},
	)
	assert.Equal(t, []time.Duration{7 * time.Second, 10 * time.Second}, at(ws))

	ws = deadline.Split(start, start.Add(7*time.Second), // short: c's 1 s first, then 4:8 of 6 s
		deadline.Phase{Name: "a", Reserve: deadline.Fixed(4 * time.Second), Max: time.Second},
		deadline.Phase{Name: "b", Reserve: deadline.Fixed(8 * time.Second)},
		deadline.Phase{Name: "c", Reserve: deadline.Fixed(time.Second), Critical: true},
	)
	assert.Equal(t, []time.Duration{time.Second, 6 * time.Second, 7 * time.Second}, at(ws))
	// b, from a's cut at 1 s: 6 s left, c's 1 s first, 5 s of its 8.
	assert.Equal(t, []time.Duration{2 * time.Second, 3 * time.Second, 0}, shorts(ws))
	assert.Equal(t, []time.Time{start.Add(6 * time.Second), start.Add(6 * time.Second), start.Add(7 * time.Second)}, hards(ws))
}
