package pause_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Timeline (limit 1, phase deadline 10 s, hard 60 s, in-flight preserves finish):
//
//	0 s  A starts (15 s)      B waits for the slot
//	10 s phase deadline       B's wait gives up: B is NotStarted
//	15 s A preserved          Run returns
func TestNoPreserveStartsAfterPhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "A", Latency: 15 * time.Second},
			&fakesandbox.Sandbox{Name: "B", Latency: time.Second})
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.Preserved, entry(t, rep, "A").Outcome)
		b := entry(t, rep, "B")
		assert.Equal(t, pause.NotStarted, b.Outcome)
		assert.Equal(t, 0, b.Attempts)
		assert.True(t, b.Start.IsZero())
		assert.Equal(t, 15*time.Second, took)
		assert.Equal(t, 1, rep.Passes, "no pass after the phase deadline")
	})
}

func TestCancelAtDeadlineCancelsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 4, 8*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2, CancelAtDeadline: true})
		require.NoError(t, err)
		rep, took := runFor(t, p, 5*time.Second, 20*time.Second)
		assert.Equal(t, 2, rep.Counts[pause.TimedOut])
		assert.Equal(t, 2, rep.Counts[pause.NotStarted])
		assert.Equal(t, 5*time.Second, took)
		assert.Contains(t, rep.Entries[0].Error, "deadline exceeded")
	})
}

// "Never abort a pause halfway": in-flight pauses run on past the phase
// deadline and finish; nothing new starts.
func TestFinishInFlightLetsRunningPausesFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 4, 8*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2})
		require.NoError(t, err)
		rep, took := runFor(t, p, 5*time.Second, 20*time.Second)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 2, rep.Counts[pause.NotStarted])
		assert.Equal(t, 8*time.Second, took)
		assert.False(t, rep.Hard.IsZero())
	})
}

func TestFinishInFlightStopsAtHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 1, 30*time.Second)
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, 5*time.Second, 20*time.Second)
		assert.Equal(t, pause.TimedOut, rep.Entries[0].Outcome)
		assert.Equal(t, 20*time.Second, took)
	})
}

// A Preserve that ignores its context cannot hold Run more than
// ReturnSlack past the hard deadline (or past the phase deadline when there
// is no later hard one).
func TestHangCannotHoldRunPastHardDeadline(t *testing.T) {
	for _, tc := range []struct {
		hard, want time.Duration
	}{{30 * time.Second, 30*time.Second + pause.ReturnSlack}, {0, 10*time.Second + pause.ReturnSlack}} {
		t.Run(fmt.Sprintf("hard %v", tc.hard), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := fakesandbox.NewNode()
				node.Add(&fakesandbox.Sandbox{Name: "stuck", Faults: []fakesandbox.Fault{fakesandbox.Hang}})
				node.AddN("ok", 3, time.Second)
				p, err := pause.New(node, pause.Config{})
				require.NoError(t, err)
				rep, took := runFor(t, p, 10*time.Second, tc.hard)
				assert.Equal(t, tc.want, took)
				stuck := entry(t, rep, "stuck")
				assert.Equal(t, pause.TimedOut, stuck.Outcome)
				assert.Contains(t, stuck.Error, "abandoned")
				assert.Equal(t, 3, rep.Counts[pause.Preserved])
				time.Sleep(fakesandbox.DefaultHang)
			})
		})
	}
}

// Cancelling Run's context (a second SIGTERM, force mode) ends the phase:
// nothing new starts and running preserves are cancelled.
func TestCancelledContextEndsThePhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 10, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2, CancelAtDeadline: true})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(3*time.Second, cancel)
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 2, rep.Counts[pause.TimedOut])
		assert.Equal(t, 6, rep.Counts[pause.NotStarted])
		assert.Equal(t, 8, rep.Lost())
	})
}

func TestRunWithoutDeadlinePreservesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 20, time.Minute)
		p, err := pause.New(node, pause.Config{Limit: 4})
		require.NoError(t, err)
		rep := p.Run(t.Context(), time.Time{})
		assert.Equal(t, 20, rep.Counts[pause.Preserved])
		assert.True(t, rep.Deadline.IsZero())
	})
}

// hard alone bounds a Run whose context has no deadline.
func TestHardAloneIsThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 4, 10*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(t.Context(), start.Add(25*time.Second))
		assert.Equal(t, 25*time.Second, time.Since(start))
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 1, rep.Counts[pause.TimedOut])
		assert.Equal(t, 1, rep.Counts[pause.NotStarted])
	})
}

// The wait for a slot is bounded by the phase deadline: with the only slot
// held by a Preserve that ignores its context, Run still returns at the
// hard deadline, and the sandbox that waited is NotStarted.
func TestSlotWaitGivesUpAtPhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "stuck", Faults: []fakesandbox.Fault{fakesandbox.Hang}},
			&fakesandbox.Sandbox{Name: "waiting", Latency: time.Second})
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 30*time.Second)
		assert.Equal(t, 30*time.Second+pause.ReturnSlack, took)
		assert.Equal(t, pause.TimedOut, entry(t, rep, "stuck").Outcome)
		assert.Equal(t, pause.NotStarted, entry(t, rep, "waiting").Outcome)
		time.Sleep(fakesandbox.DefaultHang)
	})
}

// prompt is a sandbox whose Preserve takes forever but returns its
// context's error the moment the context ends, as a well-behaved one does.
type prompt struct{ id string }

func (p prompt) ID() string { return p.id }
func (p prompt) Preserve(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// The in-flight "abandoned" verdict is for a Preserve that outlives its
// context; one that returns ctx.Err() at the very instant the hard
// deadline ends its context is TimedOut with its own error.
//
//	0 s start    10 s phase deadline: nothing new    30 s hard: ctx ends, Preserve returns
func TestPreserveReturningAtTheHardDeadlineIsNotAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			return []pause.Sandbox{prompt{"prompt"}}, nil
		}), pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 30*time.Second)
		assert.Equal(t, 30*time.Second, took, "Run returns when the Preserve does, not ReturnSlack later")
		e := entry(t, rep, "prompt")
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Equal(t, context.DeadlineExceeded.Error(), e.Error)
		assert.NotContains(t, e.Error, "abandoned")
	})
}

// late is a sandbox whose Preserve ignores its context and succeeds at a
// fixed instant.
type late struct {
	id string
	at time.Time
}

func (l late) ID() string { return l.id }
func (l late) Preserve(context.Context) error {
	time.Sleep(time.Until(l.at))
	return nil
}

// A Preserve that returns at the very instant Run stops waiting for it
// (ReturnSlack past the hard deadline) may settle itself, and complete the
// adaptive limit's first epoch, while Run is writing its Report; the
// Report's limit is read under the limit's lock, not raced with the worker
// moving it. Which of the two goes first varies, hence twenty Runs; the
// race detector (go test -race) is what fails.
//
//	0 s  four start at limit 8   1 s three preserved (three samples)
//	30 s + ReturnSlack: the fourth returns (the epoch's last sample: 8 -> 16) as Run stops waiting
func TestPreserveSettlingAsRunReturnsDoesNotRaceTheReport(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			hard := time.Now().Add(30 * time.Second)
			sbs := []pause.Sandbox{late{"slow", hard.Add(pause.ReturnSlack)}}
			for i := range 3 {
				sbs = append(sbs, late{fmt.Sprint("quick-", i), time.Now().Add(time.Second)})
			}
			p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }), pause.Config{})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			rep := p.Run(ctx, hard)
			for i := range 3 {
				assert.Equal(t, pause.Preserved, entry(t, rep, fmt.Sprint("quick-", i)).Outcome)
			}
			assert.Contains(t, []pause.Outcome{pause.Preserved, pause.TimedOut}, entry(t, rep, "slow").Outcome, "settled by its worker, or abandoned")
			assert.Contains(t, []int{8, 16}, rep.Limit)
			time.Sleep(time.Second) // the fourth's worker settles
		})
	}
}

// A Preserve that returns after Run stopped waiting for it (ReturnSlack past
// the hard deadline: a worker held up that long on a loaded node), but
// before Run made its Report, is accounted as it ended: the sandbox it
// preserved is preserved, not abandoned as lost (the operator restores or
// re-creates a sandbox the Report says was lost). One still running when
// the Report is made stays abandoned, and Run does not wait for it. Run
// writes each abandonment's Warn line before the Report (a log pipe that
// takes 2 s a line), and the Preserve returns while it does: at the hard
// deadline exactly, at the instant Run stops waiting (which goes first
// varies, hence ten Runs), and 1 s into the lines. Before, the last (and
// some of the second) read "abandoned" and counted the sandbox lost.
//
//	0 s       "late" and "hung" start; phase deadline 10 s, hard 30 s
//	30 s + ReturnSlack: Run stops waiting: both abandoned, a 2 s line each
//	31 s + ReturnSlack: "late" returns nil
//	34 s + ReturnSlack: its line ("returned before the Report")
//	36 s + ReturnSlack: the Report: "late" preserved, "hung" abandoned
func TestPreserveReturningBeforeTheReportIsAccountedAsItEnded(t *testing.T) {
	for _, c := range []struct {
		name  string
		after time.Duration // past the hard deadline
		runs  int
	}{
		{"at the hard deadline", 0, 1},
		{"as Run stops waiting", pause.ReturnSlack, 10},
		{"while Run writes its lines", pause.ReturnSlack + time.Second, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range c.runs {
				synctest.Test(t, func(t *testing.T) {
					hard := time.Now().Add(30 * time.Second)
					sbs := []pause.Sandbox{late{"late", hard.Add(c.after)}, late{"hung", hard.Add(time.Hour)}}
					p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }),
						pause.Config{Logger: slog.New(stalling{2 * time.Second})})
					require.NoError(t, err)
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					defer cancel()
					start := time.Now()
					rep := p.Run(ctx, hard)
					e := entry(t, rep, "late")
					assert.Equal(t, pause.Preserved, e.Outcome, "its Preserve returned nil before the Report: %s", e.Error)
					assert.False(t, e.Abandoned())
					assert.Empty(t, e.Error)
					assert.Equal(t, 30*time.Second+c.after, e.Duration)
					assert.Equal(t, 1, e.Attempts)
					h := entry(t, rep, "hung")
					assert.True(t, h.Abandoned(), "still running at the Report: %s", h.Outcome)
					assert.Equal(t, 1, rep.Counts[pause.Preserved])
					assert.Equal(t, 1, rep.Lost())
					assert.LessOrEqual(t, time.Since(start), 30*time.Second+pause.ReturnSlack+3*2*time.Second,
						"Run waits for no Preserve past the hard deadline; only its own three lines")
					time.Sleep(time.Hour) // "hung" returns
				})
			}
		})
	}
}

// A Preserve abandoned past its SandboxTimeout, its slot given to the next
// sandbox, that then returns nil while the Run goes on is preserved: the
// Report is made after it returned. Before, its entry read "abandoned"
// and its sandbox counted lost.
//
//	0 s   "stuck" starts (limit 1, SandboxTimeout 5 s), ignoring its context
//	6 s   5 s + AbandonAfter: abandoned; "next" starts (4 s)
//	8 s   "stuck" returns nil
//	10 s  "next" preserved: the Report
func TestPreserveAbandonedAtItsTimeoutThatReturnsBeforeTheReportIsPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "next", Latency: 4 * time.Second})
		sbs := []pause.Sandbox{late{"stuck", start.Add(8 * time.Second)}}
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			rest, err := node.List(ctx)
			return append(sbs, rest...), err
		}), pause.Config{Limit: 1, SandboxTimeout: 5 * time.Second})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 10*time.Second, took)
		e := entry(t, rep, "stuck")
		assert.Equal(t, pause.Preserved, e.Outcome, "its Preserve returned nil before the Report: %s", e.Error)
		assert.Equal(t, 8*time.Second, e.Duration)
		n := entry(t, rep, "next")
		assert.Equal(t, pause.Preserved, n.Outcome)
		assert.Equal(t, 6*time.Second, n.Start.Sub(start), "its slot was given away at the abandonment")
		assert.NoError(t, rep.Err())
	})
}

// pausedLate is a sandbox whose first preserve takes a second and whose
// preserve again, ignoring its context, returns ErrGone at once after
// took: a server whose listing lagged the pause, holding the second
// request before it answers "already paused".
type pausedLate struct {
	calls *int
	took  time.Duration
}

func (s pausedLate) ID() string { return "lagged" }
func (s pausedLate) Preserve(context.Context) error {
	if *s.calls++; *s.calls == 1 {
		time.Sleep(time.Second)
		return nil
	}
	time.Sleep(s.took)
	return pause.ErrGone
}

// Fault: a preserve again of a sandbox preserved in an earlier pass (a
// listing that lagged the pause), abandoned past its SandboxTimeout and
// returning "already preserved" (ErrGone) before the Report, was reported
// as it returned, Vanished, where the same answer on time keeps the first
// preserve, Preserved (TestPreserveAgainThatFindsItPreservedKeepsItPreserved):
// the abandonment had written its entry over, and the rule that the first
// preserve stands read the entry as abandoned. A sandbox whose state is
// saved read gone, and is not restored. The rule now reads the entry as
// the task starts, and is applied where the Preserve returns, on time or
// late.
//
//	0 s  pass 1: "lagged" preserved (1 s)
//	1 s  pass 2: "lagged" again (limit 2, SandboxTimeout 5 s), "n1" (4 s)
//	5 s  "n2" (4 s)
//	7 s  "lagged" abandoned (5 s + AbandonAfter)
//	8 s  "lagged" returns ErrGone   9 s "n2" preserved: the Report
func TestPreserveAgainAbandonedThatFindsItPreservedKeepsItPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls, listings int
		lagged := pausedLate{&calls, 7 * time.Second}
		n1 := &fakesandbox.Sandbox{Name: "n1", Latency: 4 * time.Second}
		n2 := &fakesandbox.Sandbox{Name: "n2", Latency: 4 * time.Second}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			switch listings++; listings {
			case 1:
				return []pause.Sandbox{lagged}, nil
			case 2:
				return []pause.Sandbox{lagged, n1, n2}, nil
			}
			return nil, nil
		}), pause.Config{Limit: 2, SandboxTimeout: 5 * time.Second, BackOff: constant(time.Second)})
		require.NoError(t, err)
		start := time.Now()
		rep, _ := runFor(t, p, time.Minute, 0)
		e := entry(t, rep, "lagged")
		require.Equal(t, 1, e.Relisted)
		require.Equal(t, 2, calls)
		assert.Equal(t, pause.Preserved, e.Outcome, "the first preserve stands: %s", e.Error)
		assert.Empty(t, e.Error)
		assert.Equal(t, 8*time.Second, e.End.Sub(start), "as its preserve again returned")
		assert.Equal(t, 3, rep.Counts[pause.Preserved], "lagged, n1 and n2")
		assert.Equal(t, 9*time.Second, entry(t, rep, "n2").End.Sub(start), "the Report was made after")
		assert.Zero(t, rep.Lost())
		time.Sleep(time.Minute) // "lagged" returns, if it had not
	})
}

// stalling is a log handler whose every Warn line takes stall to write: a
// log pipe that a busy node's collector drains late.
type stalling struct{ stall time.Duration }

func (h stalling) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h stalling) Handle(context.Context, slog.Record) error    { time.Sleep(h.stall); return nil }
func (h stalling) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h stalling) WithGroup(string) slog.Handler                { return h }

// A worker takes its next task as the one before settles, then logs and
// records that one; the phase deadline may pass meanwhile, and the task it
// took is then NotStarted, not started late (with a Start from before the
// deadline).
//
//	0 s  A starts (limit 1, phase deadline 10 s, hard 60 s)
//	9 s  A fails: B is taken; A's Warn line takes 2 s to write
//	10 s phase deadline
//	11 s A's line written: B must not start
func TestTaskTakenBeforeThePhaseDeadlineDoesNotStartAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "A", Latency: 9 * time.Second, Faults: []fakesandbox.Fault{fakesandbox.Permanent}},
			&fakesandbox.Sandbox{Name: "B", Latency: time.Second})
		p, err := pause.New(node, pause.Config{Limit: 1, Logger: slog.New(stalling{2 * time.Second})})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.Failed, entry(t, rep, "A").Outcome)
		b := entry(t, rep, "B")
		assert.Equal(t, pause.NotStarted, b.Outcome)
		assert.Equal(t, 0, b.Attempts)
		assert.True(t, b.Start.IsZero())
		assert.Equal(t, 11*time.Second, took)
	})
}

// Tighten moves the hard deadline of the Run in progress earlier: the
// preserve running then is cut, as at the hard deadline Run was given, and
// Run returns by it; a later deadline, or none running, changes nothing.
//
//	0 s   A starts (30 s), hard 60 s
//	5 s   Tighten(12 s); Tighten(40 s) is ignored
//	12 s  A's context ends: TimedOut; Run returns
func TestTightenCutsTheRunningPreservesAtTheNewHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 1, 30*time.Second)
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		assert.False(t, p.Tighten(time.Now()), "no Run in progress")
		t0 := time.Now()
		go func() {
			time.Sleep(5 * time.Second)
			assert.True(t, p.Tighten(t0.Add(12*time.Second)))
			assert.False(t, p.Tighten(t0.Add(40*time.Second)), "never later")
		}()
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.TimedOut, rep.Entries[0].Outcome)
		assert.Equal(t, 12*time.Second, took)
		assert.True(t, rep.Hard.Equal(t0.Add(12*time.Second)), "the Report's hard deadline is the one the Run ended by")
		assert.False(t, p.Tighten(time.Now()), "the Run is over")
	})
}

// Fault: Tighten cut the running preserves' contexts at the new hard
// deadline, but a pass waiting for its preserves kept waiting until the
// hard deadline Run was given: a Preserve that ignores its context held
// Run 48 s past the deadline it was tightened to (drain tightens it to the
// next critical phase's start, whose reserve that spent). Run now returns
// by the new hard deadline plus ReturnSlack, the abandoned preserve
// TimedOut. docs/faults.md row 419.
//
//	0 s   hung starts (ignores its context), phase 10 s, hard 60 s
//	5 s   Tighten(12 s)
//	12 s  hung abandoned: TimedOut; Run returns (was: 60 s)
func TestTightenBoundsRunWhenAPreserveIgnoresItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "hung", Faults: []fakesandbox.Fault{fakesandbox.Hang}, HangFor: time.Hour})
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		tightenAt(t, p, 5*time.Second, 12*time.Second)
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.TimedOut, entry(t, rep, "hung").Outcome)
		assert.Equal(t, 12*time.Second+pause.ReturnSlack, took)
		time.Sleep(time.Hour) // the hung Preserve returns
	})
}

// Tighten with the zero time changes nothing, as deadline.Budget.Tighten
// does: the zero time says nothing of a deadline. Before, it was taken for
// the earliest of deadlines: the running preserves' contexts ended at
// once, and the Run kept the zero time as its hard deadline, which reads
// as none: a Preserve that ignores its context then held Run until it
// returned, an hour here, past the hard deadline Run was given and every
// phase planned after it.
//
//	0 s   hung starts (ignores its context), phase 10 s, hard 60 s
//	5 s   Tighten(zero time): false, nothing changes
//	60 s  hung abandoned: TimedOut; Run returns (was: 1 h, when hung returned)
func TestTightenWithTheZeroTimeChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "hung", Faults: []fakesandbox.Fault{fakesandbox.Hang}, HangFor: time.Hour})
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		t0 := time.Now()
		go func() {
			time.Sleep(5 * time.Second)
			assert.False(t, p.Tighten(time.Time{}), "the zero time is no deadline")
		}()
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.TimedOut, entry(t, rep, "hung").Outcome)
		assert.Equal(t, 60*time.Second+pause.ReturnSlack, took)
		assert.True(t, rep.Hard.Equal(t0.Add(60*time.Second)), "the hard deadline Run was given")
		time.Sleep(time.Hour) // the hung Preserve returns
	})
}

// stallOn is a log sink that takes stall to write the line msg and none
// for the others: a sink slow at one moment of a Run.
type stallOn struct {
	msg   string
	stall time.Duration
}

func (h stallOn) Enabled(context.Context, slog.Level) bool { return true }
func (h stallOn) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		time.Sleep(h.stall)
	}
	return nil
}
func (h stallOn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h stallOn) WithGroup(string) slog.Handler      { return h }

// Fault: a Tighten between Run's call and its registering as the Run in
// progress was dropped as if no Run were in progress: Run made its
// semaphore, span, contexts and Report and wrote its "run started" line
// first, and drain's budget moving SIGKILL earlier then (a deletion read
// landing as the preserve phase begins) left the preserves running to the
// hard deadline Run was given, past the new SIGKILL. Run now registers
// before anything else, so a Tighten from the moment it is called takes
// effect. docs/faults.md row 620.
//
//	0 s    Run is called: phase 10 s, hard 60 s; its "run started"
//	       line takes 1 s to write (a slow log sink)
//	0.5 s  Tighten(12 s), from the drain's goroutine
//	1 s    A starts (30 s)
//	12 s   A's context ends: TimedOut; Run returns (was: 30 s, A preserved
//	       past the new hard deadline, Tighten false, Report.Hard 60 s)
func TestTightenAsRunStartsTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("A", 1, 30*time.Second)
		p, err := pause.New(node, pause.Config{Logger: slog.New(stallOn{"pause: run started", time.Second})})
		require.NoError(t, err)
		t0 := time.Now()
		go func() {
			time.Sleep(500 * time.Millisecond)
			assert.True(t, p.Tighten(t0.Add(12*time.Second)), "Run was called: it is in progress")
		}()
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		require.Len(t, rep.Entries, 1)
		assert.Equal(t, pause.TimedOut, rep.Entries[0].Outcome)
		assert.Equal(t, 12*time.Second, took)
		assert.True(t, rep.Hard.Equal(t0.Add(12*time.Second)), "the Report's hard deadline is the tightened one, not %v", rep.Hard.Sub(t0))
	})
}

// Fault: a Tighten to before the phase deadline ended the running
// preserves' contexts there but not the phase: the Run went on starting
// preserves, each called with its context already over (a Preserve that
// signals before it looks at its context, as escalate's SIGTERM then
// SIGKILL, acts on its sandbox after the deadline everything must be
// over by), and a Lister that ignores its context held Run to the phase
// deadline, where Tighten's doc says Run returns by the new hard deadline.
// The tightened hard deadline now ends the phase too. docs/faults.md row
// 621.
//
//	0 s    phase 60 s, hard 60 s
//	5 s    Tighten(12 s)
//	12 s   the phase ends: no preserve starts, no listing is waited for;
//	       Run returns
func TestTightenBeforeThePhaseDeadlineEndsThePhase(t *testing.T) {
	// limit 1: A (30 s) runs, B waits for the slot; A is cut at 12 s and B
	// never starts (was: B's Preserve called at 12 s, TimedOut). The
	// progress line at 10 s counts to the new end of the phase (was: 50 s).
	t.Run("preserves", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			node := fakesandbox.NewNode()
			node.Add(&fakesandbox.Sandbox{Name: "A", Latency: 30 * time.Second})
			b := node.Add(&fakesandbox.Sandbox{Name: "B", Latency: time.Second})[0]
			var logs logbuf.Buffer
			p, err := pause.New(node, pause.Config{Limit: 1, ProgressInterval: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			tightenAt(t, p, 5*time.Second, 12*time.Second)
			rep, took := runFor(t, p, 60*time.Second, 60*time.Second)
			assert.Equal(t, pause.TimedOut, entry(t, rep, "A").Outcome)
			assert.Equal(t, pause.NotStarted, entry(t, rep, "B").Outcome)
			assert.Empty(t, b.Starts(), "B's Preserve is never called after the hard deadline")
			assert.Equal(t, 12*time.Second, took)
			assert.Contains(t, logs.String(), `msg="pause: progress: preserved 0/2, 0 failed, 2s to the preserve deadline"`)
		})
	})
	// The first listing hangs, ignoring its context: it is abandoned at
	// 12 s (was: at the phase deadline, 60 s).
	t.Run("listing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, err := pause.New(hungLister(), pause.Config{})
			require.NoError(t, err)
			tightenAt(t, p, 5*time.Second, 12*time.Second)
			rep, took := runFor(t, p, 60*time.Second, 60*time.Second)
			assert.True(t, rep.Unknown)
			assert.Equal(t, 12*time.Second, took)
			time.Sleep(time.Hour) // the hung Lister returns
		})
	})
}

// tightenAt calls p.Tighten(t0 + to) at t0 + at, from its own goroutine,
// as drain's follower of the budget does, asserting it moved the Run's hard
// deadline; it returns t0, now.
func tightenAt(t *testing.T, p *pause.Preserver, at, to time.Duration) time.Time {
	t0 := time.Now()
	go func() {
		time.Sleep(at)
		assert.True(t, p.Tighten(t0.Add(to)))
	}()
	return t0
}

// Fault: Run made its Report, then stopped being the Run in progress: a
// Tighten in between (here while a slow log sink holds the "run
// finished" line) reported that it moved the hard deadline, and the
// Report, already made, gave the old one. Tighten's doc says the Report's
// Hard is the deadline it moved to; a Run whose account is made moves
// nothing now, and Tighten says so. docs/faults.md row 623.
//
//	0 s    A (1 s) starts: phase 10 s, hard 60 s
//	1 s    A preserved; the listing finds nothing; the Report is made;
//	       "run finished" takes 1 s to write
//	1.5 s  Tighten(30 s): false (was: true, the Report's Hard 60 s)
func TestTightenAfterTheReportIsMadeMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("A", 1, time.Second)
		p, err := pause.New(node, pause.Config{Logger: slog.New(stallOn{"pause: run finished", time.Second})})
		require.NoError(t, err)
		t0 := time.Now()
		moved := make(chan bool, 1)
		go func() {
			time.Sleep(1500 * time.Millisecond)
			moved <- p.Tighten(t0.Add(30 * time.Second))
		}()
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, 2*time.Second, took)
		assert.False(t, <-moved, "the Run's account was made: Tighten moved nothing")
		assert.True(t, rep.Hard.Equal(t0.Add(60*time.Second)), "the hard deadline the Run had, not %v", rep.Hard.Sub(t0))
	})
}

// deadlineProbe is a sandbox whose Preserve reads ctx.Deadline() as it
// starts, as one that sizes its work by it does (an HTTP client's request
// timeout, a cheaper checkpoint when time is short), makes a child
// context as such a client does, and then either returns after hold,
// reading the deadline again first, or waits for its context to end.
// Times are since t0; it runs on one worker at a time (limit 1).
type deadlineProbe struct {
	id   string
	t0   time.Time
	hold time.Duration // 0: wait for the context to end

	atStart, atReturn time.Duration // ctx.Deadline(), as read then
	child             time.Duration // the deadline of a child WithTimeout(ctx, 1 min)
	childGoroutines   int           // goroutines the child's making started
	ended             time.Duration // when ctx ended, for hold 0
}

func (p *deadlineProbe) ID() string { return p.id }
func (p *deadlineProbe) Preserve(ctx context.Context) error {
	p.atStart = p.deadline(ctx)
	n := runtime.NumGoroutine()
	child, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p.childGoroutines = runtime.NumGoroutine() - n
	p.child = p.deadline(child)
	if p.hold > 0 {
		time.Sleep(p.hold)
		p.atReturn = p.deadline(ctx)
		return nil
	}
	<-ctx.Done()
	p.ended = time.Since(p.t0)
	return ctx.Err()
}

func (p *deadlineProbe) deadline(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return -1
	}
	return d.Sub(p.t0)
}

// Fault: after Tighten moved the hard deadline earlier, the context of a
// Preserve running then, and of one started after it, still said the
// hard deadline Run was given from ctx.Deadline() (75 s), while it ended
// at the new one (15 s): a Preserve that sizes its work by its deadline
// planned for a minute it did not have and was cut mid-work, where a
// cheaper preserve would have kept the sandbox. Its deadline is now the
// current hard deadline (with CancelAtDeadline, the phase deadline if
// earlier; with a SandboxTimeout, its bound if earlier), at its start and
// after each Tighten, and it ends when it did. docs/faults.md row 855.
//
//	0 s    A starts (6 s): phase 60 s, hard 75 s, limit 1
//	5 s    Tighten(15 s)
//	6 s    A reads its deadline again (was: 75 s) and returns; B starts and
//	       reads 15 s (was: 75 s)
//	15 s   B's context ends; Run returns
func TestPreserveContextDeadlineFollowsTighten(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        pause.Config
		aStart     time.Duration // A's deadline at its start, before the Tighten
		aAfter     time.Duration // after it
		childStart time.Duration // A's child's (WithTimeout 1 min at 0 s)
	}{
		{"hard deadline", pause.Config{Limit: 1}, 75 * time.Second, 15 * time.Second, 60 * time.Second},
		{"CancelAtDeadline", pause.Config{Limit: 1, CancelAtDeadline: true}, 60 * time.Second, 15 * time.Second, 60 * time.Second},
		// A's bound (10 s) is before the new hard deadline and stays; B's
		// (16 s) is after it.
		{"SandboxTimeout", pause.Config{Limit: 1, SandboxTimeout: 10 * time.Second}, 10 * time.Second, 10 * time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				a := &deadlineProbe{id: "A", t0: t0, hold: 6 * time.Second}
				b := &deadlineProbe{id: "B", t0: t0}
				p, err := pause.New(listOnce(a, b), tc.cfg)
				require.NoError(t, err)
				tightenAt(t, p, 5*time.Second, 15*time.Second)
				rep, took := runFor(t, p, 60*time.Second, 75*time.Second)
				assert.Equal(t, tc.aStart, a.atStart, "A's deadline as it started")
				assert.Equal(t, tc.childStart, a.child, "A's child's deadline as it started")
				assert.Equal(t, tc.aAfter, a.atReturn, "A's deadline after the Tighten")
				assert.Equal(t, 15*time.Second, b.atStart, "B's deadline, started after the Tighten")
				assert.Equal(t, 15*time.Second, b.child, "B's child's deadline (its own minute is later)")
				assert.Equal(t, 15*time.Second, b.ended, "B's context ends at the new hard deadline")
				assert.Zero(t, a.childGoroutines+b.childGoroutines, "a child of a Preserve's context starts no goroutine")
				assert.Equal(t, pause.Preserved, entry(t, rep, "A").Outcome)
				assert.Equal(t, pause.TimedOut, entry(t, rep, "B").Outcome)
				assert.Equal(t, 15*time.Second, took)
			})
		})
	}
}

// stallingTracerProvider makes its spans with tp (the no-op provider when
// nil), but the span named span takes stall to start, and, when sandbox is
// set, only the one for that sandbox: a span processor slow at one moment
// of a Run, as a slow log sink is (stallOn), or an exporter that starts
// spans synchronously, blocked. Per-sandbox spans are made only under a
// recording Run span: a tp of the SDK.
type stallingTracerProvider struct {
	nooptrace.TracerProvider
	tp            trace.TracerProvider
	span, sandbox string
	stall         time.Duration
}

func (p stallingTracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	tp := p.tp
	if tp == nil {
		tp = p.TracerProvider
	}
	return stallingTracer{tp.Tracer(name, opts...), p}
}

type stallingTracer struct {
	trace.Tracer
	p stallingTracerProvider
}

func (s stallingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if name == s.p.span && (s.p.sandbox == "" || spanOfSandbox(opts, s.p.sandbox)) {
		time.Sleep(s.p.stall)
	}
	return s.Tracer.Start(ctx, name, opts...)
}

// spanOfSandbox reports whether a span started with opts is the one for
// the sandbox id (its drainkit.pause.sandbox attribute).
func spanOfSandbox(opts []trace.SpanStartOption, id string) bool {
	cfg := trace.NewSpanStartConfig(opts...)
	for _, a := range cfg.Attributes() {
		if a.Key == "drainkit.pause.sandbox" && a.Value.AsString() == id {
			return true
		}
	}
	return false
}

// Fault: a worker that took a sandbox before the phase deadline and was
// still starting its span at the hard deadline (the TracerProvider's
// Start, blocked) held the Run: the end of the pass waited for every task
// starting, spinning, until the span started, a minute past the hard
// deadline (in virtual time it never returned: a goroutine that spins
// keeps the bubble's clock still), and the sandbox's Preserve was then
// called, past the hard deadline, after the Run had given it up. It is now
// NotStarted at the hard deadline, and its Preserve is never called.
//
//	0 s      A starts (9.5 s; limit 1, phase deadline 10 s, hard 30 s)
//	9.5 s    A preserved; B taken: its span takes a minute to start
//	30 s + ReturnSlack: Run returns: B not started
//	69.5 s   B's span started: its Preserve is not called
func TestTaskStartingAtTheHardDeadlineDoesNotHoldTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		sbs := node.Add(&fakesandbox.Sandbox{Name: "A", Latency: 9500 * time.Millisecond},
			&fakesandbox.Sandbox{Name: "B", Latency: time.Second})
		tp := sdktrace.NewTracerProvider()
		defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
		p, err := pause.New(node, pause.Config{Limit: 1, TracerProvider: stallingTracerProvider{tp: tp, span: "pause.Preserve", sandbox: "B", stall: time.Minute}})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 30*time.Second)
		assert.Equal(t, 30*time.Second+pause.ReturnSlack, took)
		assert.Equal(t, pause.Preserved, entry(t, rep, "A").Outcome)
		b := entry(t, rep, "B")
		assert.Equal(t, pause.NotStarted, b.Outcome)
		assert.True(t, b.Start.IsZero())
		assert.Zero(t, b.Attempts)
		time.Sleep(time.Minute) // B's span starts
		synctest.Wait()
		assert.Zero(t, sbs[1].Attempts(), "its Preserve is not called after the Run gave it up")
	})
}

// Fault: a Tighten to before the phase deadline ends the phase there (row
// 621), but what the Run read of its phase deadline did not move: its
// schedule ordered the pass for the time left to the phase deadline Run
// was given, the Lister's context said that deadline, the lines' time_left
// counted to it and the Report's Deadline was it. A Tighten landing as the
// Run starts (a read of the pod's deletion as the preserve phase begins)
// left a pass ordered longest first for 59 s it did not have: 4 sandboxes
// preserved where shortest first keeps 20. The phase deadline every part
// of the Run reads is now the earlier of the two. docs/faults.md row 856.
//
//	0 s     Run is called: phase 60 s, hard 60 s, limit 4, 20 x 9 s and
//	        20 x 1 s; its span takes 1 s to start (a slow tracer)
//	0.5 s   Tighten(11.5 s)
//	1 s     "run started", time_left 10.5s (was: 59s); the Lister's
//	        deadline 11.5 s (was: 60 s); the pass orders shortest first
//	        (was: longest first)
//	6 s     the 20 short ones preserved (was: 4 long ones by 10 s)
//	11.5 s  the phase ends: the long ones running are cut; Run returns,
//	        Report.Deadline 11.5 s (was: 60 s)
func TestPhaseDeadlineAsTightenMovedItIsTheOneTheRunReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := mixedNode()
		var listedDeadline time.Time
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			if listedDeadline.IsZero() {
				listedDeadline, _ = ctx.Deadline()
			}
			return node.List(ctx)
		})
		var logs logbuf.Buffer
		p, err := pause.New(lister, pause.Config{Limit: 4, TracerProvider: stallingTracerProvider{span: "pause.Run", stall: time.Second},
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		t0 := tightenAt(t, p, 500*time.Millisecond, 11500*time.Millisecond)
		rep, took := runFor(t, p, 60*time.Second, 60*time.Second)
		assert.Equal(t, 11500*time.Millisecond, took)
		assert.Equal(t, 20, rep.Counts[pause.Preserved], "shortest first, for the 10.5 s left when the pass ordered")
		assert.Equal(t, 11500*time.Millisecond, rep.Deadline.Sub(t0), "the Report's phase deadline")
		assert.Equal(t, 11500*time.Millisecond, listedDeadline.Sub(t0), "the Lister's context's deadline")
		assert.Contains(t, logs.String(), `msg="pause: run started" time_left=10.5s`)
		assert.Contains(t, logs.String(), `order=shortest_first limit=4 time_left=10.5s`)
	})
}

// A Tighten to a hard deadline already past (drain's budget reading a
// deletion whose grace has run out) ends the running preserves' contexts
// when it is called, and Run gives them ReturnSlack from then, as from a
// hard deadline: one that returns at once is TimedOut with its own error,
// not abandoned as a Preserve that ignored its context (the slack was
// counted from the deadline in the past, already over: both were
// abandoned, Run returning before their goroutines did).
//
//	0 s  two 30 s preserves start (they return when their context ends)
//	5 s  Tighten(2 s): their contexts end, they return; Run returns
func TestTightenToAPastDeadlineLetsPreservesReturnWithTheirOwnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, 30*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2})
		require.NoError(t, err)
		t0 := time.Now()
		go func() {
			time.Sleep(5 * time.Second)
			assert.True(t, p.Tighten(t0.Add(2*time.Second)))
		}()
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, 5*time.Second, took, "at the Tighten: the contexts ended then")
		require.Len(t, rep.Entries, 2)
		for _, e := range rep.Entries {
			assert.Equal(t, pause.TimedOut, e.Outcome, e.ID)
			assert.False(t, e.Abandoned(), "%s returned as its context ended: %s", e.ID, e.Error)
			assert.Equal(t, context.Canceled.Error(), e.Error, e.ID)
		}
		assert.True(t, rep.Hard.Equal(t0.Add(2*time.Second)), "the Report's hard deadline is the one Tighten set")
	})
}

// climbLog is a log sink that takes stall to write the line of the
// preserve of the sandbox stallID and keeps the best throughput of every
// "concurrency changed" line: the figure an operator reads the climb by.
type climbLog struct {
	stallID string
	stall   time.Duration
	best    *[]float64
}

func (h climbLog) Enabled(context.Context, slog.Level) bool { return true }
func (h climbLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		switch {
		case a.Key == "sandbox" && a.Value.String() == h.stallID && r.Message == "pause: sandbox preserved":
			time.Sleep(h.stall)
		case a.Key == "best_throughput_sandboxes_per_s":
			*h.best = append(*h.best, a.Value.Float64())
		}
		return true
	})
	return nil
}
func (h climbLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h climbLog) WithGroup(string) slog.Handler      { return h }

// A worker that took its next task as the one before settled, and found
// the phase over when it came to start it (its line logged late), counted
// that task in flight for the rest of the Run: the preserves still
// running then were measured at one more at once than ran, and the climb
// learned a throughput the node never gave. The worker now gives the
// task's count back when it does not start it.
//
//	0 s    a1 (3 s) and long (20 s) start: limit 2, ceiling 4
//	3 s    a2 (3 s); 6 s a3 (3.5 s)
//	9.5 s  a3 preserved: x is taken; a3's line takes 1.5 s to write
//	10 s   phase deadline
//	11 s   a3's line written: x does not start
//	20 s   long preserved, the epoch's fourth sample: the limit goes to 4
//
// long ran 11 s with a3 or x taken beside it and 9 s alone: 1.55 at once
// on average, not 2, and the level's throughput is (2+2+2+1.55) / (3+3+
// 3.5+20 s) = 0.2559 sandboxes a second, where the phantom made it
// 8 / 29.5 s = 0.2712.
func TestTaskTakenAndNotStartedIsNotMeasuredInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "a1", Latency: 3 * time.Second})
		for i := range 7 { // no Estimate: the pass runs in listing order
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("long", i), Latency: 20 * time.Second})
		}
		node.Add(&fakesandbox.Sandbox{Name: "a2", Latency: 3 * time.Second},
			&fakesandbox.Sandbox{Name: "a3", Latency: 3500 * time.Millisecond},
			&fakesandbox.Sandbox{Name: "x", Latency: time.Second})
		var best []float64
		p, err := pause.New(node, pause.Config{MaxLimit: 16, Order: pause.OrderFIFO,
			Logger: slog.New(climbLog{stallID: "a3", stall: 1500 * time.Millisecond, best: &best})})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 60*time.Second)
		assert.Equal(t, pause.NotStarted, entry(t, rep, "x").Outcome)
		assert.Equal(t, 20*time.Second, took)
		require.Len(t, best, 1, "the epoch at 8 decided once")
		assert.InDelta(t, 31.55/29.5, best[0], 1e-9, "the long ones measured at 7.55 at once, not 8")
		assert.Equal(t, 16, rep.Limit)
	})
}

// Fault: a Preserve abandoned at the hard deadline that returned nil once
// Run had made its Report, a Report returned once that says timed_out,
// was dropped without a word: the sandbox was preserved, and nothing
// told a user of pause so. A Warn line now says how it ended, and what
// the Report says; the Report is as Run made it.
//
//	0 s   "late" starts, ignoring its context; phase deadline 10 s, hard 30 s
//	30 s + ReturnSlack: Run abandons it and returns its Report: timed_out
//	31 s  "late" returns nil: the line
func TestPreserveReturningAfterTheReportIsLoggedAsItEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		hard := time.Now().Add(30 * time.Second)
		sbs := []pause.Sandbox{late{"late", hard.Add(time.Second)}}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return sbs, nil }),
			pause.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rep := p.Run(ctx, hard)
		e := entry(t, rep, "late")
		require.True(t, e.Abandoned(), "still running at the Report: %s", e.Error)
		assert.NotContains(t, logs.String(), "after the Report")

		time.Sleep(time.Second)
		synctest.Wait()
		assert.Regexp(t, `level=WARN msg="pause: sandbox abandoned returned after the Report: preserved \(the Report says timed_out\)" `+
			`sandbox=late outcome=preserved report_says=timed_out\n`, logs.String(), "before: no line")
		assert.True(t, entry(t, rep, "late").Abandoned(), "the Report, returned once, is as Run made it")
	})
}
