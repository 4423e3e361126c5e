package drain

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the kubelet overran. An exec hook that ignored its deadline held
// the pod past the grace period; the kubelet then grants the one-off 2 s
// and SIGKILLs. Shutdown must still run every step, squeezed by the plan's
// rule (no step here is critical: all share in proportion to their
// reserves) inside those 2 s, and say which reserves were short.
//
//	T0 ...................... 60.5 s   61.5 s           62.5 s
//	preStop (hook overruns)   SIGTERM  budget deadline  SIGKILL
//	                          (margin shrinks to half of the 2 s)
func TestKubeletOverrunLeavesTwoSecondsAndEveryStepStillRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
			sandboxes: 4, latency: 2 * time.Second, limit: 8,
			steps: []Step{recordStep("ublk", 3*time.Second, &ran), recordStep("http", time.Second, &ran)},
			edit: func(c *Config) { // cut the preserves at their deadline, so the steps get their shares
				c.Pause.CancelAtDeadline = true
			}})
		t0 := time.Now()
		f.budget.OnPreStop(t0) // the hook started (an exec hook that never called /drain)
		time.Sleep(60*time.Second + 500*time.Millisecond)

		rep := f.d.Shutdown(context.Background())
		assert.True(t, t0.Add(62500*time.Millisecond).Equal(rep.Budget.Kill), "SIGTERM + the 2 s floor")
		assert.Equal(t, []string{"ublk", "http"}, ran, "every step ran")
		// Reserves: preserve 2 s (4 sandboxes, 8 at a time, 2 s), ublk 3 s,
		// http 1 s; 1 s left to the budget deadline, shared in proportion.
		assert.Equal(t, 5*time.Second, rep.Shortfall)
		pres := rep.Phase(PhasePreserve)
		assert.InDelta(t, time.Second/3, pres.Deadline.Sub(pres.Start), 1, "2/6 of the 1 s left (the rounding goes to the first)")
		assert.Equal(t, 4, rep.Preserve.Lost(), "no time for a 2 s preserve: reported, not hidden")
		ublk := rep.Phase("ublk")
		assert.Equal(t, ublk.Reserve-ublk.Deadline.Sub(ublk.Start), ublk.Short)
		assert.InDelta(t, time.Second/2, ublk.Deadline.Sub(ublk.Start), 1, "3/4 of the 2/3 s preserve left")
		http := rep.Phase("http")
		assert.True(t, http.Deadline.Equal(rep.Budget.Deadline), "the last phase gets what the ublk step did not use")
		assert.False(t, rep.Phase("http").Deadline.After(rep.Budget.Deadline))
		assert.True(t, pres.Deadline.Equal(pres.End), "the preserves were cut at the phase deadline")
		assert.Equal(t, 2*time.Second-pres.Duration, rep.Headroom, "only the preserve phase took time")
		require.Error(t, rep.Err())
		assert.Contains(t, rep.Err().Error(), "4 sandbox(es) not preserved")
	})
}

// Fault: a teardown step hangs and ignores its context. It is abandoned at
// its deadline; the next step still gets its whole reserve and runs.
//
//	SIGTERM (T0) ......... 45 s (hang's deadline) ... 55 s (budget deadline) | 60 s SIGKILL
//	preserve, "hang" starts  abandoned; "http" runs
func TestHangingTeardownStepIsAbandonedAndTheNextStepRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var httpRan atomic.Bool
		var httpLeft time.Duration
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
			sandboxes: 2, latency: time.Second,
			steps: []Step{
				step("hang", 10*time.Second, func(ctx context.Context) error {
					<-release // ignores ctx
					return nil
				}),
				step("http", 10*time.Second, func(ctx context.Context) error {
					httpRan.Store(true)
					dl, _ := ctx.Deadline()
					httpLeft = time.Until(dl)
					return nil
				}),
			}})
		t0 := time.Now()
		rep := f.d.Shutdown(context.Background())
		close(release)

		hang := rep.Phase("hang")
		assert.Equal(t, Abandoned, hang.Result)
		assert.True(t, t0.Add(45*time.Second).Equal(hang.Deadline), "budget deadline 55 s minus the http reserve")
		assert.Equal(t, returnSlack, hang.End.Sub(hang.Deadline), "abandoned a moment after its deadline")
		assert.True(t, httpRan.Load())
		assert.Equal(t, OK, rep.Phase("http").Result)
		assert.Equal(t, 10*time.Second-returnSlack, httpLeft, "http kept its reserve, less the abandon slack")
		assert.Contains(t, rep.Err().Error(), "hang: abandoned")
		assert.Positive(t, rep.Headroom)
	})
}

// Fault: a person's Ctrl-C (SIGINT) during the shutdown SIGTERM started.
// Force mode: no new preserve starts, the one in flight finishes (pause's
// default, without Config.CancelAtDeadline), and each remaining step gets only its reserve.
//
//	0 s SIGTERM: preserve 100 sandboxes one at a time (2 s each)
//	11 s SIGINT: no new preserve; the sixth, started at 10 s, runs on
//	12 s sixth preserved; "ublk" gets its 3 s reserve
//	15 s "ublk" cut off; "http" gets its 1 s reserve; 16 s report
func TestSIGINTAfterSIGTERMForcesTheStepsToTheirReserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		waitCtx := func(ctx context.Context) error { <-ctx.Done(); return context.Cause(ctx) }
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 100, latency: 2 * time.Second, limit: 1,
			steps: []Step{step("ublk", 3*time.Second, waitCtx),
				step("http", time.Second, waitCtx)}})
		sigs := make(chan os.Signal, 2)
		t0 := time.Now()
		done := make(chan *Report)
		go func() { done <- f.d.ServeSignals(context.Background(), sigs) }()
		sigs <- syscall.SIGTERM
		time.Sleep(11 * time.Second)
		sigs <- syscall.SIGINT
		rep := <-done

		assert.True(t, rep.Forced)
		assert.True(t, t0.Add(11*time.Second).Equal(rep.ForcedAt))
		assert.Equal(t, 6, rep.Preserve.Counts[pause.Preserved], "2 s each, one at a time; the one in flight at SIGINT finishes")
		assert.Equal(t, 12*time.Second, rep.Phase(PhasePreserve).Duration)
		assert.Equal(t, 3*time.Second, rep.Phase("ublk").Duration, "its reserve, not its deadline an hour away")
		assert.Equal(t, time.Second, rep.Phase("http").Duration)
		assert.ErrorContains(t, errors.New(rep.Phase("ublk").Error), ErrForced.Error())
		assert.Equal(t, 16*time.Second, rep.End.Sub(t0))
	})
}

// Fault (a review): a SIGTERM again during the shutdown forced it. The
// kubelet sends it itself when it restarted: it runs the termination over
// and stops the container again, and a runtime that sends the stop signal
// with every stop request delivers SIGTERM again (a grace shortened after
// SIGTERM brings none: the kubelet keeps the grace its termination started
// with, docs/real-kubelet.md). Forced, the drain
// started no new preserve and lost the sandboxes that still had time. A
// SIGTERM again now forces nothing (it re-reads the pod's deletion, with
// Config.Pod: TestSIGTERMAgainReadsTheShorterDeletion).
//
//	0 s SIGTERM: preserve 12 sandboxes one at a time (2 s each), an hour's grace
//	5 s SIGTERM again: the preserves go on (before: forced, 3 preserved, 9 lost)
//	24 s all 12 preserved
func TestSIGTERMAgainDoesNotForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 12, latency: 2 * time.Second, limit: 1,
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
		sigs := make(chan os.Signal, 2)
		t0 := time.Now()
		done := make(chan *Report)
		go func() { done <- f.d.ServeSignals(context.Background(), sigs) }()
		sigs <- syscall.SIGTERM
		time.Sleep(5 * time.Second)
		sigs <- syscall.SIGTERM
		rep := <-done

		assert.False(t, rep.Forced, "forced at T0+%v", rep.ForcedAt.Sub(t0))
		assert.Equal(t, 12, rep.Preserve.Counts[pause.Preserved], "every sandbox fits in the hour")
		assert.Equal(t, 24*time.Second, rep.Phase(PhasePreserve).Duration)
		assert.NoError(t, rep.Err())
		assert.Contains(t, logs.String(), `level=INFO msg="drain: SIGTERM during the shutdown: not forcing: `)
		assert.NotContains(t, logs.String(), "drain: forced")
	})
}

func TestForceBeforeShutdownEndsThePreStopWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second, sandboxes: 3, latency: time.Second})
		call := f.callPreStop(t.Context(), "")
		time.Sleep(20 * time.Second)
		f.d.Force()
		sum := call.wait(t)
		assert.Equal(t, reasonForced, sum.Reason)
		assert.Equal(t, 20*time.Second, sum.Waited)
		f.d.Shutdown(context.Background())
	})
}

// Fault: a drain forced before its preserve phase began (a person's second
// Ctrl-C during the preStop wait or the gate's) started preserves in it,
// or not, by the scheduler's whim: the phase's context was ended by
// context.AfterFunc on the force, which, the force being already made,
// runs in a goroutine of its own, and the Preserver's Run, called at once,
// often listed and started every preserve before that goroutine ran
// (166 of 200 runs of this drain preserved all 4), where Force's doc says
// no new preserve starts. A phase or gate wait that begins forced now has
// its context ended before it is returned. Each of the 20 drains here
// starts no preserve (was: most of them preserved all 4). docs/faults.md
// row 624.
func TestDrainForcedBeforeThePreservePhaseStartsNoPreserve(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: time.Second, limit: 4})
			f.d.Force()
			rep := f.d.Shutdown(context.Background())
			require.NotNil(t, rep.Preserve)
			assert.Zero(t, rep.Preserve.Counts[pause.Preserved], "forced: no preserve starts")
			for _, sb := range f.node.Sandboxes() {
				assert.Empty(t, sb.Starts(), "%s's Preserve was called", sb.Name)
			}
			assert.Contains(t, rep.Phase(PhasePreserve).Error, ErrForced.Error())
		})
	}
}

func TestCancellingShutdownsContextForces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 100, latency: 2 * time.Second, limit: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 7*time.Second)
		defer cancel()
		rep := f.d.Shutdown(ctx)
		assert.True(t, rep.Forced)
		// Force at 7 s starts no new preserve; the one in flight since 6 s
		// finishes at 8 s (pause's default: no CancelAtDeadline).
		assert.Equal(t, 8*time.Second, rep.End.Sub(rep.Start))
		assert.Equal(t, 4, rep.Preserve.Counts[pause.Preserved])
	})
}

// Fault (row 1233): a ctx already done when Shutdown was called forced
// the drain from its start, as one cancelled during it does. That is the
// ctx of Go's usual wiring, the one signal.NotifyContext ended:
//
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
//	<-ctx.Done()
//	rep := d.Shutdown(ctx)
//
// With 27 s of a 30 s grace left, no preserve started: 2 of 2 sandboxes
// lost (not_started), the log saying only "drain: forced". It forces
// nothing now, and says so at Warn; a ctx that ends during the drain
// still forces it.
func TestShutdownOfACtxThatHadEndedIsNoForce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 30 * time.Second, sandboxes: 2, latency: time.Second,
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errors.New("terminated signal received")) // as signal.NotifyContext's, at SIGTERM

		rep := f.d.Shutdown(ctx)
		assert.NoError(t, rep.Err())
		assert.False(t, rep.Forced)
		assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
		assert.Contains(t, logs.String(), `level=WARN msg="drain: Shutdown's ctx had ended before the call: not taken for force;`)
		assert.Contains(t, logs.String(), `cause="terminated signal received"`)
	})
}

func TestShutdownIsSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int32
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: time.Second,
			steps: []Step{step("count", time.Second, func(context.Context) error { runs.Add(1); return nil })}})
		reps := make([]*Report, 5)
		var wg sync.WaitGroup
		for i := range reps {
			wg.Go(func() { reps[i] = f.d.Shutdown(context.Background()) })
		}
		wg.Wait()
		for _, r := range reps {
			assert.Same(t, reps[0], r, "every caller gets the same Report")
		}
		assert.Equal(t, int32(1), runs.Load())
		assert.Same(t, reps[0], f.d.Shutdown(context.Background()), "a later call too")
		assert.Equal(t, 4, reps[0].Preserve.Counts[pause.Preserved])
	})
}

// AgentENV skipped its network cleanup when a pause failed; here every step
// runs whatever the preserve phase did.
func TestStepsRunEvenWhenPreservationPartlyFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 3, latency: time.Second,
			steps: []Step{recordStep("network", time.Second, &ran), step("ublk", time.Second, func(context.Context) error { ran = append(ran, "ublk"); return errors.New("device busy") }),
				recordStep("http", time.Second, &ran)}})
		f.node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Permanent}})
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, []string{"network", "ublk", "http"}, ran)
		assert.Equal(t, Failed, rep.Phase(PhasePreserve).Result)
		assert.Equal(t, 1, rep.Lost())
		assert.Equal(t, Failed, rep.Phase("ublk").Result)
		assert.Equal(t, "device busy", rep.Phase("ublk").Error)
		assert.Equal(t, OK, rep.Phase("http").Result)
	})
}

func TestGatePhaseWaitsForInFlightCreatesBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 1, latency: time.Second,
			edit: func(c *Config) { c.InFlightWait = 20 * time.Second }})
		quick, err := f.d.Gate().Enter(Create)
		require.NoError(t, err)
		_, err = f.d.Gate().Enter(Create) // a create that never ends
		require.NoError(t, err)
		go func() { time.Sleep(3 * time.Second); quick() }()
		rep := f.d.Shutdown(context.Background())
		gate := rep.Phase(PhaseGate)
		assert.Equal(t, TimedOut, gate.Result)
		assert.Equal(t, 20*time.Second, gate.Duration, "bounded by InFlightWait")
		assert.Equal(t, 1, f.d.Gate().InFlight(Create))
	})
}

func TestReportIsJSONAndLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		var mu sync.Mutex
		h := slog.NewJSONHandler(&lockedWriter{w: &logs, mu: &mu}, nil)
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Second,
			edit: func(c *Config) { c.Logger = slog.New(h) }})
		rep := f.d.Shutdown(context.Background())
		f.d.Shutdown(context.Background())
		assert.Equal(t, 1, strings.Count(logs.String(), "drain: shutdown finished"))
		assert.Contains(t, logs.String(), `"preserved":2`)

		b, err := json.Marshal(rep)
		require.NoError(t, err)
		var back Report
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, rep.Headroom, back.Headroom)
		assert.Equal(t, phaseNames(rep), phaseNames(&back))
		assert.Equal(t, 2, back.Preserve.Counts[pause.Preserved])
		assert.Equal(t, deadline.AnchorSIGTERM, back.Budget.Anchor)
	})
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestNewNamesTheBadField(t *testing.T) {
	b, err := deadline.New(60*time.Second, deadline.Config{Margin: 5 * time.Second})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	nop := func(context.Context) error { return nil }
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no budget", Config{Sandboxes: node}, "Config.Budget"},
		{"nothing to preserve", Config{Budget: b}, "Config.Sandboxes or Config.Preserver"},
		{"empty step name", Config{Budget: b, Sandboxes: node, Steps: []Step{step("", 0, nop)}}, "Config.Steps[0].Phase().Name"},
		{"duplicate step", Config{Budget: b, Sandboxes: node, Steps: []Step{step("a", 0, nop), step("a", 0, nop)}}, "Config.Steps[1].Phase().Name \"a\" duplicates Config.Steps[0]"},
		{"reserved name", Config{Budget: b, Sandboxes: node, Steps: []Step{step("preserve", 0, nop)}}, "Config.Steps[0].Phase().Name"},
		{"nil step", Config{Budget: b, Sandboxes: node, Steps: []Step{nil}}, "Config.Steps[0] is nil"},
		{"nil run", Config{Budget: b, Sandboxes: node, Steps: []Step{NewStep(deadline.Phase{Name: "a"}, nil)}}, "Config.Steps[0]: NewStep"},
		{"nil *ublk.Teardown-like step", Config{Budget: b, Sandboxes: node, Steps: []Step{(*nilStep)(nil)}}, "Config.Steps[0] is nil"},
		{"negative reserve", Config{Budget: b, Sandboxes: node, Steps: []Step{step("a", -1, nop)}}, "Config.Steps[0].Phase().Reserve"},
		// It named the plan's phases[3], not the step.
		{"negative max", Config{Budget: b, Sandboxes: node, Steps: []Step{NewStep(deadline.Phase{Name: "net", Max: -time.Second},
			func(context.Context) (any, error) { return nil, nil })}}, `Config.Steps[0].Phase().Max ("net") must not be negative, got -1s`},
		{"reserves exceed grace", Config{Budget: b, Sandboxes: node, Steps: []Step{step("a", 40*time.Second, nop),
			step("b", 20*time.Second, nop)}}, "Config.Steps[0] a 40s, Config.Steps[1] b 20s"},
		{"negative poll", Config{Budget: b, Sandboxes: node, PollInterval: -1}, "Config.PollInterval"},
		{"negative in-flight wait", Config{Budget: b, Sandboxes: node, InFlightWait: -1}, "Config.InFlightWait"},
		{"negative kubelet grace", Config{Budget: b, Sandboxes: node, KubeletGrace: -1}, "Config.KubeletGrace must not be negative"},
		{"kubelet grace without a pod", Config{Budget: b, Sandboxes: node, KubeletGrace: time.Second}, "Config.KubeletGrace (1s) needs Config.Pod"},
		{"bad pause config", Config{Budget: b, Sandboxes: node, Pause: pause.Config{Limit: -1}}, "drain: Config.Pause: pause: Config.Limit must be >= 0, got -1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// nilStep is a Step type whose nil pointer New must refuse.
type nilStep struct{}

func (*nilStep) Phase() deadline.Phase            { return deadline.Phase{Name: "x"} }
func (*nilStep) Run(context.Context) (any, error) { return nil, nil }

// Fault (an adversarial pass): a Lister that takes 5 s and ignores its
// context. It may not spend the 2 s the last step reserved, and the Report
// accounts for every moment from SIGTERM to the end, phase after phase.
//
//	0 s SIGTERM, no preStop: the gate counts, bounded halfway to the preserve deadline (6.5 s)
//	3.35 s the count abandoned (3.25 s and the 100 ms slack); the gate has nothing in flight
//	3.35 s preserve lists again (5 s more) ... 6.5 s listing abandoned: unknown, an error
//	6.5 s http gets its whole 2 s; the budget's deadline is 8.5 s (10 s - 1.5 s margin)
func TestSlowListerCannotSpendTheStepsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 1, time.Second) // the preserve reserve: 1 s
		slow := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			time.Sleep(5 * time.Second) // ignores ctx
			return node.List(ctx)
		})
		b, err := deadline.New(10*time.Second, deadline.Config{})
		require.NoError(t, err)
		var window time.Duration
		d, err := New(Config{Budget: b, Sandboxes: slow, Steps: []Step{step("http", 2*time.Second, func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			window = time.Until(dl)
			return nil
		})}})
		require.NoError(t, err)
		t0 := time.Now()
		rep := d.Shutdown(context.Background())

		assert.Equal(t, 2*time.Second, window, "the step got its whole reserve")
		assert.Zero(t, rep.Phase("http").Short)
		assert.Equal(t, 3350*time.Millisecond, rep.Phase(PhaseGate).Duration, "the count is the gate phase's time, in the Report")
		pres := rep.Phase(PhasePreserve)
		assert.Equal(t, Failed, pres.Result)
		assert.Equal(t, t0.Add(6500*time.Millisecond), pres.End, "the listing was abandoned at the preserve deadline")
		require.Error(t, rep.Err(), "a listing that never succeeded is not success")
		// Every moment is some phase's: they follow each other with no gap.
		assert.True(t, rep.Phases[0].Start.Equal(rep.Start))
		for i := 1; i < len(rep.Phases); i++ {
			assert.True(t, rep.Phases[i].Start.Equal(rep.Phases[i-1].End), "%s starts where %s ended", rep.Phases[i].Name, rep.Phases[i-1].Name)
		}
		assert.True(t, rep.Phases[len(rep.Phases)-1].End.Equal(rep.End))
		time.Sleep(10 * time.Second) // let the abandoned listing return
	})
}

// The default Preserver logs to Config.Logger, unless Config.Pause sets a
// Logger of its own, which wins; the same holds for the providers.
func TestDefaultPreserverTakesTheDrainersLoggerUnlessPauseSetsOne(t *testing.T) {
	for _, own := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var drainLog, pauseLog logbuf.Buffer
			b, err := deadline.New(60*time.Second, deadline.Config{})
			require.NoError(t, err)
			node := fakesandbox.NewNode()
			node.AddN("sb", 2, time.Second)
			cfg := Config{Budget: b, Sandboxes: node, Logger: slog.New(slog.NewTextHandler(&drainLog, nil))}
			if own {
				cfg.Pause.Logger = slog.New(slog.NewTextHandler(&pauseLog, nil))
			}
			d, err := New(cfg)
			require.NoError(t, err)
			b.OnSIGTERM(time.Now())
			rep := d.Shutdown(t.Context())
			require.NoError(t, rep.Err())
			assert.Contains(t, drainLog.String(), "drain:", "the Drainer logs to Config.Logger")
			if own {
				assert.Contains(t, pauseLog.String(), "pause: run started")
				assert.NotContains(t, drainLog.String(), "pause: run started", "Config.Pause.Logger wins")
			} else {
				assert.Contains(t, drainLog.String(), "pause: run started", "the default Preserver inherits Config.Logger")
			}
		})
	}
}

// The one line the Drainer logs for a shutdown names the sandboxes it
// lost, whatever lost them: the one-call path (Server.Run) hands the caller
// only an exit code, so without Config.Pod (whose SandboxesLost event names
// them) that line is the operator's only account. Before, it said lost=4
// and named none: a sandbox whose turn never came and one whose Preserve
// hung past the hard deadline are not logged one by one.
func TestShutdownLogLineNamesTheLostSandboxes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		b, err := deadline.New(10*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "vmm-hung", Faults: []fakesandbox.Fault{fakesandbox.Hang}},
			&fakesandbox.Sandbox{Name: "snap-refused", Faults: []fakesandbox.Fault{fakesandbox.Permanent}},
			&fakesandbox.Sandbox{Name: "slow", Latency: 20 * time.Second},
			&fakesandbox.Sandbox{Name: "never-started", Latency: time.Second})
		d, err := New(Config{Budget: b, Sandboxes: node, Pause: pause.Config{Limit: 2, Order: pause.OrderFIFO},
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))})
		require.NoError(t, err)
		b.OnSIGTERM(time.Now())
		rep := d.Shutdown(t.Context())
		require.Equal(t, 4, rep.Lost(), "%v", rep.Preserve.Counts)
		line := logs.String()
		assert.Contains(t, line, `msg="drain: shutdown finished"`)
		assert.Contains(t, line, "vmm-hung(timed_out)")
		assert.Contains(t, line, "snap-refused(failed)")
		assert.Contains(t, line, "slow(timed_out)")
		assert.Contains(t, line, "never-started(not_started)")
		time.Sleep(fakesandbox.DefaultHang)
	})
}

// When the reserves do not fit in the grace period, New's error names each
// reserve and where it comes from. Before, it blamed Config.Steps even for
// a Drainer with no step at all, where the preserve phase's one round at
// the default Estimator's 1 s was what did not fit in a 1 s grace.
func TestNewShortfallNamesEachReserveAndItsField(t *testing.T) {
	node := fakesandbox.NewNode()
	nop := func(context.Context) error { return nil }
	for _, c := range []struct {
		name  string
		grace time.Duration
		cfg   Config
		want  []string
		never string
	}{
		// One round of 1 s fits in a 1 s grace, the kubelet's 2 s after
		// SIGTERM holding it (TestOneRoundThatTheKubeletsTwoSecondsAfterSIGTERMHoldIsTaken).
		{"no step", time.Second, Config{Sandboxes: node, Pause: pause.Config{Estimator: deadline.NewEstimator(1200 * time.Millisecond)}},
			[]string{"the reserves need 200ms more than the 1s that the kubelet's 2s after SIGTERM leave after the margin 1s, the preStop wait run on to the end of the grace period 1s:",
				"preserve 1.2s (Config.Pause.Estimator: 1 round of 1.2s)"}, "Config.Steps"},
		{"a step", 2 * time.Second, Config{Sandboxes: node, Steps: []Step{step("http", 250*time.Millisecond, nop)}},
			[]string{"need 250ms more than the 1s the grace period 2s leaves after the margin 1s:",
				"preserve 1s (Config.Pause.Estimator: 1 round of 1s)", "Config.Steps[0] http 250ms"}, ""},
		{"own estimator", 2 * time.Second, Config{Sandboxes: node, Pause: pause.Config{Estimator: deadline.NewEstimator(3 * time.Second)}},
			[]string{"preserve 3s (Config.Pause.Estimator: 1 round of 3s)"}, "Config.Steps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := deadline.New(c.grace, deadline.Config{})
			require.NoError(t, err)
			c.cfg.Budget = b
			_, err = New(c.cfg)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			if c.never != "" {
				assert.NotContains(t, err.Error(), c.never)
			}
		})
	}
}

// Fault (docs/faults.md row 231): the process outlived the SIGKILL its
// budget expected (the budget took a wrong grace, as before row 229 a
// second deletion's deletionTimestamp), and a step whose turn came then got
// an expired context: the device teardown did nothing and left the daemon
// with live devices to the process's exit (measured under the real kubelet
// with the real API server: sandboxd's device daemon never stopped). A
// step that starts past the expected SIGKILL gets its reserve, as under
// Force.
//
//	0 s     SIGTERM: SIGKILL expected at 10 s
//	0-3 s   step "slow": the budget learns a SIGKILL of now (3 s), wrongly
//	3 s     step "ublk" (reserve 2 s): its window is gone; it runs to 3.5 s
func TestStepPastTheExpectedSIGKILLGetsItsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		var left time.Duration
		var budget *deadline.Budget
		f := newFixture(t, fixtureOpts{grace: 10 * time.Second, margin: time.Second,
			steps: []Step{
				step("slow", time.Second, func(ctx context.Context) error {
					time.Sleep(3 * time.Second)
					budget.Tighten(time.Now()) // a wrong SIGKILL, learned late
					return nil
				}),
				step("ublk", 2*time.Second, func(ctx context.Context) error {
					dl, _ := ctx.Deadline()
					left = time.Until(dl)
					select {
					case <-time.After(500 * time.Millisecond): // the daemon stops
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				}),
			},
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
		budget = f.budget
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, OK, rep.Phase("ublk").Result, rep.Phase("ublk").Error)
		assert.Equal(t, 2*time.Second, left, "the step's reserve")
		assert.Contains(t, logs.String(), `msg="drain: the process outlived the SIGKILL the budget expected: the step gets its reserve" step=ublk`)
	})
}

// Fault: a Drainer not made by New (a zero drain.Drainer, or the nil
// *Drainer New returns with its error) panicked with a nil dereference in
// Shutdown, HandleSignals, ServeSignals, Force, Forced, Terminating and
// PreStop's handler: at SIGTERM, the process died with every sandbox, no
// Report and no log line saying why. Each now says "drain: Drainer not
// made by drain.New": the signal methods return at once (at the start,
// not at SIGTERM) a Report whose Err says it, logged at Error, and the
// hook answers 500; the accessors return zero values, never nil.
// docs/faults.md row 242.
func TestDrainerNotMadeByNewSaysSoAndNeverPanics(t *testing.T) {
	const want = "drain: Drainer not made by drain.New"
	for name, d := range map[string]*Drainer{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // a method that blocks is a deadlock, not a hang
				var logs logbuf.Buffer
				old := slog.Default()
				slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
				defer slog.SetDefault(old)
				ctx := t.Context()
				for method, report := range map[string]func() *Report{
					"Shutdown":      func() *Report { return d.Shutdown(ctx) },
					"HandleSignals": func() *Report { return d.HandleSignals(ctx) },
					"ServeSignals":  func() *Report { return d.ServeSignals(ctx, make(chan os.Signal)) },
				} {
					rep := report()
					require.NotNil(t, rep, method)
					require.ErrorContains(t, rep.Err(), want, method)
					assert.Equal(t, Failed, rep.Phase(PhasePreserve).Result, method)
				}
				assert.Equal(t, 3, strings.Count(logs.String(), `level=ERROR msg="`+want), logs.String())

				rec := httptest.NewRecorder()
				d.PreStop().ServeHTTP(rec, httptest.NewRequest("GET", "/drain", nil))
				assert.Equal(t, http.StatusInternalServerError, rec.Code)
				assert.Contains(t, rec.Body.String(), want)

				d.Force()
				assert.Nil(t, d.Forced(), "Force does nothing: never forced")
				for ch, c := range map[string]<-chan struct{}{"Terminating": d.Terminating(), "Done": d.Done()} {
					select {
					case <-c:
					default:
						t.Errorf("%s is not closed: its Report is ready at once", ch)
					}
				}
				assert.Zero(t, d.Running())
				require.NotNil(t, d.Gate())
				assert.False(t, d.Gate().Closed(), "an open Gate nothing closes")
				require.NotNil(t, d.Budget())
				assert.Zero(t, d.Budget().Grace())
				require.NotNil(t, d.Plan())
				assert.Empty(t, d.Plan().Phases())
			})
		})
	}
}

// Fault: HTTPServerStep with a nil *http.Server failed at SIGTERM with a
// recovered nil-dereference panic in place of an error. ShutdownHTTP (and
// so the step) now returns an error naming it. docs/faults.md row 242.
func TestHTTPServerStepOfANilServerFailsSayingSo(t *testing.T) {
	require.ErrorContains(t, ShutdownHTTP(t.Context(), nil), "drain: ShutdownHTTP: srv is nil")
	_, err := HTTPServerStep("http", nil, time.Second).Run(t.Context())
	require.ErrorContains(t, err, "srv is nil")
}

// A request the gate does not wait for (a log follow served ungated) held
// the server's step to its deadline, and its error said only "context
// deadline exceeded (context deadline exceeded)" (a review). It now says
// how many connections were still in a request, and what to do; a
// ConnState the server set before is still called.
func TestHTTPServerStepSaysWhatHeldItToItsDeadline(t *testing.T) {
	entered := make(chan struct{})
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(entered)
		<-r.Context().Done() // follows until its client or the server goes
	})}
	var states atomic.Int32
	srv.ConnState = func(net.Conn, http.ConnState) { states.Add(1) }
	step := HTTPServerStep("http", srv, time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/logs?follow=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	<-entered

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = step.Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 connection(s) still in a request at the step's deadline, closed now")
	assert.Contains(t, err.Error(), "drain.Stream")
	assert.Positive(t, states.Load(), "the server's own ConnState is still called")
	assert.ErrorIs(t, <-served, http.ErrServerClosed)
}
