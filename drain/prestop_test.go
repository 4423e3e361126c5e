package drain

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/drainkit/drainkit/internal/logbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// The seed's shape at full scale (AgentENV #413): grace 3600 s, sandboxes
// that never finish on their own. The preStop wait must stop where the
// later phases' reserves begin, not at the end of the grace period.
//
//	T0 ........................................ 3555 s ...... 3565 s ...... 3595 s | 3600 s
//	preStop: gate closed, readiness 503, wait   drain deadline  preserve ends  budget deadline  SIGKILL
//	(ends 0.3 s before the drain deadline:      (SIGTERM)       ublk step (30 s reserve)  margin 5 s
//	the kubelet's time to SIGTERM)
func TestPreStopWaitStopsAtTheDrainDeadlineLeavingTheLaterReserves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 20, latency: 2 * time.Second, limit: 4,
			steps: []Step{recordStep("ublk", 30*time.Second, &ran)}})
		t0 := time.Now()

		call := f.callPreStop(t.Context(), "")
		synctest.Wait()
		assert.True(t, f.d.Gate().Closed(), "the first preStop call closes the gate at once")
		assert.Equal(t, deadline.AnchorPreStop, f.budget.State().Anchor)
		assert.Equal(t, t0, f.budget.Start(), "T0 is the preStop call")

		sum := call.wait(t)
		// 3600 - 5 (margin) - 30 (ublk) - ceil(20/4) x 2 s (preserve) = 3555 s,
		// less the 0.3 s the kubelet may take from the answer to SIGTERM.
		assert.Equal(t, 3555*time.Second-sigtermLag, call.at.Sub(t0))
		assert.True(t, sum.Done)
		assert.Equal(t, reasonDeadline, sum.Reason)
		assert.Equal(t, 20, sum.Running)
		assert.True(t, t0.Add(3555*time.Second).Equal(sum.DrainDeadline))

		// The kubelet: hook took 3554.7 s, 3554 in whole seconds -> SIGTERM
		// at once here, SIGKILL 46 s later, at T0 + 3600.7 s.
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, 20, rep.Preserve.Counts["preserved"])
		assert.Equal(t, []string{"ublk"}, ran)
		assert.True(t, t0.Add(3600*time.Second+700*time.Millisecond).Equal(rep.Budget.Kill))
		assert.Equal(t, 36*time.Second, rep.Headroom, "preserve took its 10 s reserve; 30 s ublk reserve + 5 s margin + the 1 s the truncation gave left")
		require.NoError(t, rep.Err())
	})
}

func TestPreStopReturnsAsSoonAsNoSandboxIsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 3, latency: 2 * time.Second})
		t0 := time.Now()
		go func() { // the sandboxes end on their own, the last at 149.5 s
			ends := []time.Duration{50 * time.Second, 100 * time.Second, 149500 * time.Millisecond}
			for i, s := range f.node.Sandboxes() {
				time.Sleep(time.Until(t0.Add(ends[i])))
				f.node.Remove(s.ID())
			}
		}()
		sum := f.callPreStop(t.Context(), "").wait(t)
		assert.Equal(t, reasonDrained, sum.Reason)
		assert.Equal(t, 0, sum.Running)
		assert.Equal(t, 150*time.Second, time.Since(t0), "the last ended at 149.5 s; the next count, each second, sees none")
		rep := f.d.Shutdown(context.Background())
		assert.Empty(t, rep.Preserve.Entries, "nothing left to preserve")
		assert.Equal(t, OK, rep.Phase(PhaseDrain).Result)
	})
}

// Fault: the preStop hook is called twice (an exec hook retried, two
// kubelet attempts). The second call joins the first wait: T0 stays the
// first call, and both answer together.
//
//	0 s    call 1: T0, gate closed, wait starts
//	10 s   call 2: joins
//	3555 s both answer with the same summary
func TestPreStopCalledTwiceJoinsTheFirstWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second,
			sandboxes: 20, latency: 2 * time.Second, limit: 4,
			steps: []Step{step("ublk", 30*time.Second, func(context.Context) error { return nil })}})
		t0 := time.Now()
		first := f.callPreStop(t.Context(), "")
		time.Sleep(10 * time.Second)
		second := f.callPreStop(t.Context(), "")
		s1, s2 := first.wait(t), second.wait(t)
		assert.Equal(t, t0, f.budget.Start(), "the second call does not move T0")
		assert.Equal(t, s1, s2)
		assert.Equal(t, first.at, second.at)
		assert.Equal(t, 3555*time.Second-sigtermLag, second.at.Sub(t0))
		f.d.Shutdown(context.Background())
	})
}

// A caller with a per-request bound (?wait=) gets the progress so far and
// can call again: that is how the exec-hook helper polls.
func TestPreStopWaitQueryAnswersEarlyWithProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Second})
		sum := f.callPreStop(t.Context(), "?wait=30s").wait(t)
		assert.False(t, sum.Done)
		assert.Equal(t, reasonWaiting, sum.Reason)
		assert.Equal(t, 2, sum.Running)
		assert.Equal(t, 30*time.Second, sum.Waited)
		f.d.Shutdown(context.Background())
	})
}

// Fault (a fresh-eyes review): the first count is slow (an API server
// under load: 30 s). A call with ?wait=9s, the exec hook's, whose requests
// time out at 10 s, still answers within its bound; it waited for the count
// instead, so every request of the exec hook timed out and after five the
// hook gave up and let the kubelet send SIGTERM a minute into a wait of an
// hour.
//
//	0 s    call ?wait=9s: T0, gate closed, the first count starts
//	9 s    the call answers: not done, the drain deadline as planned at T0
//	30 s   the count returns 2; a new call answers with it
func TestPreStopWaitQueryAnswersInTimeWhileTheFirstCountIsSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		slow := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			time.Sleep(30 * time.Second)
			return node.List(ctx)
		})
		b, err := deadline.New(3600*time.Second, deadline.Config{Margin: 5 * time.Second})
		require.NoError(t, err)
		d, err := New(Config{Budget: b, Sandboxes: slow,
			Pause: pause.Config{Limit: 1, Estimator: deadline.NewEstimator(time.Second)}})
		require.NoError(t, err)
		f := &fixture{node: node, budget: b, d: d}
		t0 := time.Now()

		call := f.callPreStop(t.Context(), "?wait=9s")
		sum := call.wait(t)
		assert.Equal(t, 9*time.Second, call.at.Sub(t0), "the bound holds while the first count runs")
		assert.False(t, sum.Done)
		assert.Equal(t, reasonWaiting, sum.Reason)
		assert.Equal(t, 9*time.Second, sum.Waited)
		assert.True(t, t0.Add(3594*time.Second).Equal(sum.DrainDeadline),
			"before any count, the plan's: 3600 - 5 (margin) - one round of 1 s; got %v", sum.DrainDeadline.Sub(t0))
		assert.True(t, t0.Add(3600*time.Second).Equal(sum.Kill))

		time.Sleep(25 * time.Second) // the count returned at 30 s
		sum = f.callPreStop(t.Context(), "?wait=1s").wait(t)
		assert.Equal(t, 2, sum.Running)
		assert.True(t, t0.Add(3593*time.Second).Equal(sum.DrainDeadline), "two rounds of 1 s now")
		d.Shutdown(context.Background())
		time.Sleep(30 * time.Second) // let the listings the shutdown abandoned return
	})
}

// Fault: SIGTERM with no preStop hook. T0 is the SIGTERM; the whole grace
// period is the SIGTERM phase's.
func TestSIGTERMWithoutPreStopAnchorsTheBudgetAtSIGTERM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
			sandboxes: 8, latency: 2 * time.Second, limit: 4,
			steps: []Step{recordStep("ublk", 10*time.Second, &ran)}})
		time.Sleep(50 * time.Second) // the server runs for a while
		sigterm := time.Now()
		rep := f.d.Shutdown(context.Background())
		assert.Equal(t, deadline.AnchorSIGTERM, rep.Budget.Anchor)
		assert.Equal(t, sigterm, rep.Budget.Start)
		assert.Equal(t, sigterm.Add(60*time.Second), rep.Budget.Kill)
		assert.True(t, f.d.Gate().Closed())
		assert.Nil(t, rep.Phase(PhaseDrain), "no preStop ran")
		assert.Equal(t, []string{PhaseGate, PhasePreserve, "ublk"}, phaseNames(rep))
		assert.Equal(t, 8, rep.Preserve.Counts["preserved"])
		assert.Equal(t, 4*time.Second, rep.Phase(PhasePreserve).Duration, "8 sandboxes, 4 at a time, 2 s each")
		assert.Equal(t, 56*time.Second, rep.Headroom)
	})
}

// Fault: the preStop hook arrives after SIGTERM (a slow kubelet, or a
// retried exec hook). It answers at once and changes nothing.
func TestPreStopAfterSIGTERMAnswersAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: time.Second})
		sigterm := time.Now()
		done := make(chan *Report)
		go func() { done <- f.d.Shutdown(context.Background()) }()
		synctest.Wait()
		call := f.callPreStop(t.Context(), "")
		sum := call.wait(t)
		assert.Equal(t, sigterm, call.at, "no wait at all")
		assert.True(t, sum.Done)
		assert.Equal(t, reasonSIGTERM, sum.Reason)
		rep := <-done
		assert.Equal(t, deadline.AnchorSIGTERM, rep.Budget.Anchor, "the late preStop did not re-anchor the budget")
		assert.Nil(t, rep.PreStop)
	})
}

// SIGTERM while the preStop wait is on (the kubelet gave up on the hook:
// the grace it used ran out) ends the wait at once, and the budget expects
// SIGKILL 2 s later, whatever grace it was built with.
func TestShutdownEndsTheRunningPreStopWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: 100 * time.Millisecond})
		call := f.callPreStop(t.Context(), "")
		time.Sleep(100 * time.Second)
		rep := f.d.Shutdown(context.Background())
		sum := call.wait(t)
		assert.Equal(t, reasonSIGTERM, sum.Reason)
		assert.Equal(t, 100*time.Second, sum.Waited)
		require.NotNil(t, rep.PreStop)
		assert.Equal(t, Stopped, rep.Phase(PhaseDrain).Result, "SIGTERM ended the wait: not a timeout")
		assert.Equal(t, reasonSIGTERM, rep.PreStop.Reason)
		assert.Equal(t, deadline.MinimumGracePeriod, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "the call was still open: the kubelet gave up on it")
		require.NoError(t, rep.Err())
	})
}

// A person's Ctrl-C (SIGINT) during the preStop wait is not the kubelet
// giving up on the hook: the kubelet never sends SIGINT. It was taken for
// one, and the budget cut to 2 s after it (a review: one SIGINT during the
// hook of a 30 s grace, 12 of 20 lost). The wait ends and the drain starts,
// SIGKILL where the hook's grace puts it.
func TestSIGINTDuringThePreStopWaitKeepsTheHooksGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second, sandboxes: 4, latency: 100 * time.Millisecond,
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
		call := f.callPreStop(t.Context(), "")
		hook := time.Now()
		time.Sleep(100 * time.Second)
		sigs := make(chan os.Signal, 1)
		sigs <- os.Interrupt
		rep := f.d.ServeSignals(t.Context(), sigs)
		sum := call.wait(t)
		assert.Equal(t, reasonSIGTERM, sum.Reason, "the wait ended")
		assert.Equal(t, hook.Add(3600*time.Second), rep.Budget.Kill, "the hook's grace, not 2 s after the signal")
		assert.NotContains(t, logs.String(), "the kubelet's grace period ran out")
		require.NoError(t, rep.Err())
	})
}

func phaseNames(r *Report) []string {
	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	return names
}

// A long preStop wait logs where it stands every ten seconds: how many
// sandboxes still run and how long until the drain deadline.
func TestPreStopWaitLogsProgressAtASteadyRhythm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second,
			sandboxes: 4, latency: 2 * time.Second, limit: 4,
			edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) }})
		call := f.callPreStop(t.Context(), "")
		sum := call.wait(t) // 60 - 5 (margin) - 2 (one round of four) = 53 s
		assert.Equal(t, reasonDeadline, sum.Reason)
		var lines []string
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "drain: preStop wait: ") {
				lines = append(lines, line)
			}
		}
		require.Len(t, lines, 5, "at 10, 20, 30, 40 and 50 s of a 53 s wait")
		assert.Contains(t, lines[0], `msg="drain: preStop wait: 4 running, 43s to the drain deadline" running=4 time_left=43s`)
		assert.Contains(t, lines[4], `msg="drain: preStop wait: 4 running, 3s to the drain deadline"`)
		f.d.Shutdown(context.Background())
	})
}

// flakyLister lists node's sandboxes, failing with err while fail is set.
type flakyLister struct {
	node *fakesandbox.Node
	mu   sync.Mutex
	err  error
}

func (l *flakyLister) List(ctx context.Context) ([]pause.Sandbox, error) {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return l.node.List(ctx)
}

func (l *flakyLister) set(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

// Fault (docs/faults.md row 233): a Lister that stays broken during a long
// preStop wait logged "listing running sandboxes failed" at Warn at every
// count, once a second (PollInterval): 3600 lines for an hour's wait. It
// is logged at Warn when the error is news, at Debug when it repeats, and
// once at Info when a count succeeds again.
//
//	0 s    preStop: the listing fails (Warn), and fails again each second (Debug)
//	30 s   it fails another way (Warn)
//	60 s   it works again (Info)
func TestPreStopWaitLogsABrokenListingOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		lister := &flakyLister{err: errors.New("sandboxd: 503")}
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, sandboxes: 2, latency: time.Second,
			edit: func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}})
		lister.node = f.node
		f.d.lister = lister
		f.callPreStop(t.Context(), "?wait=0s")
		time.Sleep(30 * time.Second)
		lister.set(errors.New("sandboxd: connection refused"))
		time.Sleep(30 * time.Second)
		lister.set(nil)
		time.Sleep(5 * time.Second)
		f.d.Shutdown(context.Background())

		out := logs.String()
		warn := `level=WARN msg="drain: listing running sandboxes failed"`
		assert.Equal(t, 2, strings.Count(out, warn), "once per error\n%s", out)
		assert.Greater(t, strings.Count(out, `level=DEBUG msg="drain: listing running sandboxes failed"`), 50, "the repeats, at Debug")
		assert.Equal(t, 1, strings.Count(out, `level=INFO msg="drain: listing running sandboxes works again" failures=`))
	})
}

// Fault (row 1232): a Lister that panics (bounded.Call makes the panic an
// error, the stack in its text) was news at every count: the stack names
// the goroutine of that count, and row 233's once-per-error took each for
// another error. An hour's preStop wait logged its stack at Warn every
// second: 31 lines, 35 KB in 30 s, 3600 lines in the hour. Now once, the
// stack with it, and the repeats at Debug on one line.
func TestPreStopWaitLogsAPanickingListerOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, sandboxes: 2, latency: time.Second,
			edit: func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}})
		f.d.lister = pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { panic("sandboxd: assignment to entry in nil map") })
		f.callPreStop(t.Context(), "?wait=0s")
		time.Sleep(30 * time.Second)
		f.d.Shutdown(context.Background())

		out := logs.String()
		warn := `level=WARN msg="drain: listing running sandboxes failed" err="panic: sandboxd: assignment to entry in nil map\n`
		assert.Equal(t, 1, strings.Count(out, warn), "once, with its stack\n%s", out)
		assert.Equal(t, 1, strings.Count(out, `level=WARN msg="drain: listing running sandboxes failed"`), "once")
		assert.Greater(t, strings.Count(out, `level=DEBUG msg="drain: listing running sandboxes failed" err="panic: sandboxd: assignment to entry in nil map" failures=`), 20,
			"the repeats, at Debug, without the stack")
	})
}

// The wait ends sigtermLag before the drain deadline, the kubelet's time
// from the hook's answer to SIGTERM, however long a count of the running
// sandboxes takes (an HTTP listing, the supervisor's over AgentENV's API).
// It woke for a last count at the deadline less the lag, so the count ate
// the lag: a 100 ms listing ended the wait 200 ms before the deadline, and
// one of 300 ms or more ran to the deadline itself, where it was cut and
// logged at Warn as a failed listing ("context deadline exceeded") on
// every such drain. A count is not started now unless the last one's time
// still fits before the lag.
//
//	0 ............ preStop: counts every second, each taking the listing's time
//	57.5 s ....... 60 s - 1 s margin - 2 × 300 ms (8 at 4) = 58.4 s drain deadline,
//	               less the lag (300 ms) and a count: the wait ends, no count cut
func TestPreStopWaitKeepsItsLagWhateverACountTakes(t *testing.T) {
	for _, listing := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(listing.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs logbuf.Buffer
				f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: time.Second, sandboxes: 8, latency: 300 * time.Millisecond, limit: 4,
					edit: func(c *Config) {
						c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
						c.Sandboxes = slowLister(c.Sandboxes, listing)
					}})
				sum := f.callPreStop(t.Context(), "").wait(t)
				assert.Equal(t, reasonDeadline, sum.Reason)
				assert.False(t, sum.End.After(sum.DrainDeadline.Add(-sigtermLag)),
					"the wait ended %v before the drain deadline, less than the lag %v", sum.DrainDeadline.Sub(sum.End), sigtermLag)
				assert.NotContains(t, logs.String(), "listing running sandboxes failed", "no count was cut")
				require.NoError(t, f.d.Shutdown(t.Context()).Err())
			})
		})
	}
}

// slowLister is l whose every listing takes d first (a listing over HTTP),
// or until ctx ends.
func slowLister(l pause.Lister, d time.Duration) pause.Lister {
	return pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return l.List(ctx)
	})
}

// pageOne lists those of *node's first n sandboxes that run, and fails on
// the page after with a 503: a paginated API whose page 2, with the
// others, fails at every listing after the first complete ones.
func pageOne(node **fakesandbox.Node, n, complete int) pause.Lister {
	lists := 0
	return pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		running, err := (*node).List(ctx)
		if lists++; lists <= complete || err != nil {
			return running, err
		}
		first := map[pause.Sandbox]bool{}
		for _, sb := range (*node).Sandboxes()[:n] {
			first[sb] = true
		}
		var page []pause.Sandbox
		for _, sb := range running {
			if first[sb] {
				page = append(page, sb)
			}
		}
		return page, errors.New("page 2: 503 Service Unavailable")
	})
}

// A count of the running sandboxes whose listing failed after its first
// page (16 sandboxes, preserves of 2 s at 4 at a time) knows that those
// 16 run: the preserve reserve plans for them, 4 rounds, not for the one
// round it plans for a node never counted, and the preserve phase that
// lists the same page preserves them all.
//
//	T0 ................................. 587 s ......... 595 s | 600 s
//	preStop wait: every count 16 + 503    drain deadline  budget  SIGKILL
//	                                      (SIGTERM)       deadline
//
// After a complete count of the 20, a partial one does not forget the 4
// it could not reach: the reserve plans for 20, 5 rounds, and the Report
// names those 4, not started, beside the 16 preserved.
func TestPreStopCountOfAPartialListingPlansForWhatItListed(t *testing.T) {
	for _, tc := range []struct {
		complete, counted, preserved, lost int
		waited                             time.Duration
	}{
		{complete: 0, counted: 16, preserved: 16, lost: 0, waited: 587 * time.Second}, // 600 - 5 (margin) - 4 rounds x 2 s
		{complete: 1, counted: 20, preserved: 16, lost: 4, waited: 585 * time.Second}, // 5 rounds
	} {
		synctest.Test(t, func(t *testing.T) {
			var node *fakesandbox.Node
			f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second,
				sandboxes: 20, latency: 2 * time.Second, limit: 4,
				edit: func(c *Config) { c.Sandboxes = pageOne(&node, 16, tc.complete) }})
			node = f.node
			t0 := time.Now()

			call := f.callPreStop(t.Context(), "")
			call.wait(t)
			assert.Equal(t, tc.waited-sigtermLag, call.at.Sub(t0), "complete counts: %d", tc.complete)
			assert.Equal(t, tc.counted, f.d.Running())

			rep := f.d.Shutdown(context.Background())
			require.NotNil(t, rep.Preserve)
			assert.Equal(t, tc.preserved, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
			assert.Equal(t, tc.lost, rep.Lost())
			assert.Len(t, rep.Preserve.Entries, tc.counted)
			assert.True(t, rep.Preserve.Incomplete)
		})
	}
}
