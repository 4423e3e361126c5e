package pause_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

func constant(d time.Duration) func() backoff.BackOff {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}

func entry(t *testing.T, rep *pause.Report, id string) pause.Entry {
	t.Helper()
	for _, e := range rep.Entries {
		if e.ID == id {
			return e
		}
	}
	t.Fatalf("no entry for %s", id)
	return pause.Entry{}
}

func TestTransientErrorsAreRetriedUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		sb := node.Add(&fakesandbox.Sandbox{Name: "flaky", Latency: time.Second,
			Faults: []fakesandbox.Fault{fakesandbox.Transient, fakesandbox.Transient}})[0]
		p, err := pause.New(node, pause.Config{BackOff: constant(2 * time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 0)
		e := entry(t, rep, "flaky")
		assert.Equal(t, pause.Preserved, e.Outcome)
		assert.Equal(t, 3, e.Attempts)
		assert.Equal(t, 3, sb.Attempts())
		assert.Equal(t, 7*time.Second, took, "1 s + 2 s wait, twice, + 1 s")
		assert.Empty(t, e.Error)
	})
}

func TestPermanentErrorsAreNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "wrapped", Faults: []fakesandbox.Fault{fakesandbox.Permanent}},
			&fakesandbox.Sandbox{Name: "classified", Faults: []fakesandbox.Fault{fakesandbox.Plain}},
			&fakesandbox.Sandbox{Name: "other", Faults: []fakesandbox.Fault{fakesandbox.Transient}})
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second), Permanent: func(err error) bool { return errors.Is(err, fakesandbox.ErrPermanent) }})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		for _, id := range []string{"wrapped", "classified"} {
			e := entry(t, rep, id)
			assert.Equal(t, pause.Failed, e.Outcome, id)
			assert.Equal(t, 1, e.Attempts, id)
			assert.Contains(t, e.Error, "permanent failure", id)
		}
		assert.Equal(t, 2, entry(t, rep, "other").Attempts)
	})
}

func TestUnclassifiedErrorIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "plain", Faults: []fakesandbox.Fault{fakesandbox.Plain}})
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, pause.Preserved, entry(t, rep, "plain").Outcome)
		assert.Equal(t, 2, entry(t, rep, "plain").Attempts)
	})
}

// Attempts at 0, 11 and 22 s end at 1, 12 and 23 s; the next 10 s wait
// would end at 33 s, past the 25 s deadline, so no retry starts and the
// sandbox fails at 23 s with its last error.
func TestNoRetryWhoseWaitEndsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: time.Second, Faults: alwaysTransient()})
		p, err := pause.New(node, pause.Config{BackOff: constant(10 * time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, 25*time.Second, 0)
		e := entry(t, rep, "broken")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, 3, e.Attempts)
		assert.Equal(t, 23*time.Second, e.Duration)
		assert.Equal(t, 23*time.Second, took)
		assert.Contains(t, e.Error, "transient")
	})
}

// A retry is a new start of Preserve: none starts after the phase deadline
// even though the hard deadline is far off. Phase deadline 10 s, hard 30 s,
// 2 s attempts that always fail, 1 s waits: attempts at 0, 3, 6 and 9 s
// (the last wait ends at 9 s, before the phase deadline; the attempt then
// runs on past it, as any started preserve may); the next wait would end
// at 12 s, so the sandbox fails at 11 s with its last error, leaving the
// 19 s to the hard deadline to the phases after the preserve phase. Before
// the fix retries went on to 30 s, and under a real drain a retry woken
// just past the preserve deadline took the next step's reserve.
func TestNoRetryStartsAfterThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: 2 * time.Second, Faults: alwaysTransient()})
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 30*time.Second)
		e := entry(t, rep, "broken")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, 4, e.Attempts)
		assert.Equal(t, 11*time.Second, e.Duration)
		assert.Equal(t, 11*time.Second, took)
		assert.Contains(t, e.Error, "transient")
	})
}

// Cancelling Run's context (drain's Force) starts no retry either, even
// in the middle of a wait that would have ended in time.
func TestNoRetryStartsAfterRunIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: time.Second, Faults: alwaysTransient()})
		p, err := pause.New(node, pause.Config{BackOff: constant(2 * time.Second)})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		time.AfterFunc(2*time.Second, cancel) // during the first wait (1 s to 3 s)
		start := time.Now()
		rep := p.Run(ctx, start.Add(2*time.Minute))
		e := entry(t, rep, "broken")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, 2*time.Second, time.Since(start), "the wait ended at the cancel")
	})
}

func TestBackOffStopEndsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "x", Faults: []fakesandbox.Fault{fakesandbox.Transient, fakesandbox.Transient}})
		p, err := pause.New(node, pause.Config{BackOff: func() backoff.BackOff {
			return backoff.WithMaxRetries(backoff.NewConstantBackOff(time.Second), 1)
		}})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, pause.Failed, entry(t, rep, "x").Outcome)
		assert.Equal(t, 2, entry(t, rep, "x").Attempts)
	})
}

func TestPanicIsRecoveredWithStackAndOthersGoOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "boom", Faults: []fakesandbox.Fault{fakesandbox.Panic}})
		node.AddN("ok", 5, time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		e := entry(t, rep, "boom")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Equal(t, 1, e.Attempts, "a panic is not retried")
		assert.Contains(t, e.Error, "injected panic")
		assert.Contains(t, e.Stack, "draintest.(*Sandbox).Preserve")
		assert.Equal(t, 5, rep.Counts[pause.Preserved])
	})
}

func TestVanishedSandboxIsReportedNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "gone", Faults: []fakesandbox.Fault{fakesandbox.Vanish}})
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		e := entry(t, rep, "gone")
		assert.Equal(t, pause.Vanished, e.Outcome)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, 0, rep.Lost())
	})
}

// A sandbox that turns Running after the first listing (a resume racing
// the shutdown) is caught by the second pass; the third finds nothing new.
func TestSandboxAppearingMidRunIsCaughtByNextPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("early", 3, time.Second)
		late := &fakesandbox.Sandbox{Name: "late", Latency: time.Second}
		node.OnList = func(n int) {
			if n == 2 {
				node.Add(late)
			}
		}
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.True(t, late.Preserved())
		e := entry(t, rep, "late")
		assert.Equal(t, pause.Preserved, e.Outcome)
		assert.Equal(t, 2, e.Pass)
		assert.Equal(t, 3, rep.Passes)
		assert.Equal(t, 4, rep.Counts[pause.Preserved])
	})
}

// A failed listing is retried with the backoff inside the time left: a
// transient failure of the first listing must not lose the whole node.
func TestListErrorsAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		node.ListErr = func(n int) error {
			if n == 1 {
				return errors.New("runtime unavailable")
			}
			return nil
		}
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Empty(t, rep.ListErr)
		assert.Equal(t, 3, node.Lists(), "failed, then the two passes")
	})
}

// A listing that keeps failing is retried until no retry fits, and the
// Report says why nothing more was preserved.
func TestListErrorIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rep, took, node := runWhileLaterListingsFail(t)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, "runtime unavailable", rep.ListErr)
		// Pass 2 lists at 1 s, then at 11, 21, 31, 41, 51 s; a wait to 61 s does not fit.
		assert.Equal(t, 7, node.Lists())
		assert.Equal(t, 51*time.Second, took)
	})
}

func TestPermanentListErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.ListErr = func(int) error { return backoff.Permanent(errors.New("no runtime socket")) }
		p, err := pause.New(node, pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		assert.Equal(t, "no runtime socket", rep.ListErr)
		assert.Equal(t, 1, node.Lists())
	})
}

// hungLister is a Lister that ignores its context and answers after an
// hour, with nothing.
func hungLister() pause.Lister {
	return pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		time.Sleep(time.Hour)
		return nil, nil
	})
}

// A Lister that ignores its context cannot hold Run past the hard deadline.
func TestListerIgnoringContextIsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pause.New(hungLister(), pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 20*time.Second)
		assert.Equal(t, 10*time.Second, took, "abandoned at the phase deadline: no preserve could start after it, and the later phases keep their time")
		assert.Contains(t, rep.ListErr, "abandoned")
		time.Sleep(time.Hour)
	})
}

// Hundreds of sandboxes with every fault at once: the Report has exactly
// one entry per sandbox and the outcome each fault must produce.
func TestAllFaultsAtOnceAccountForEverySandbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		node := fakesandbox.NewNode()
		want := map[string]pause.Outcome{}
		kinds := []struct {
			faults  []fakesandbox.Fault
			outcome pause.Outcome
		}{
			{nil, pause.Preserved},
			{[]fakesandbox.Fault{fakesandbox.Transient, fakesandbox.Transient}, pause.Preserved},
			{[]fakesandbox.Fault{fakesandbox.Permanent}, pause.Failed},
			{[]fakesandbox.Fault{fakesandbox.Panic}, pause.Failed},
			{[]fakesandbox.Fault{fakesandbox.Vanish}, pause.Vanished},
			{[]fakesandbox.Fault{fakesandbox.Hang}, pause.TimedOut},
		}
		for i := range 400 {
			k := kinds[rng.IntN(len(kinds))]
			lat := time.Duration(500+rng.IntN(3000)) * time.Millisecond
			id := fmt.Sprintf("sb-%03d", i)
			node.Add(&fakesandbox.Sandbox{Name: id, Latency: lat, Estimate: lat, Faults: k.faults})
			want[id] = k.outcome
		}
		late := 0
		node.OnList = func(n int) {
			if n == 2 {
				for i := range 20 {
					id := fmt.Sprintf("late-%02d", i)
					node.Add(&fakesandbox.Sandbox{Name: id, Latency: time.Second})
					want[id] = pause.Preserved
					late++
				}
			}
		}
		p, err := pause.New(node, pause.Config{Limit: 64, BackOff: constant(time.Second), SandboxTimeout: 20 * time.Second})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Minute, 0)

		require.Len(t, rep.Entries, 420)
		seen := map[string]bool{}
		total := 0
		for _, e := range rep.Entries {
			assert.False(t, seen[e.ID], "one entry per sandbox: %s", e.ID)
			seen[e.ID] = true
			assert.Equal(t, want[e.ID], e.Outcome, e.ID)
		}
		for _, n := range rep.Counts {
			total += n
		}
		assert.Equal(t, 420, total)
		assert.Equal(t, 20, late)
		// Abandoned hangs still run in their goroutines; everything else
		// stays within the limit.
		assert.LessOrEqual(t, node.MaxInFlight(), 64+rep.Counts[pause.TimedOut])
		t.Logf("400+20 sandboxes, all faults, in %v: %v", took, rep.Counts)
		time.Sleep(fakesandbox.DefaultHang) // let the abandoned hangs return before the bubble ends
	})
}

func TestReportIsJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		node.Add(&fakesandbox.Sandbox{Name: "boom", Faults: []fakesandbox.Fault{fakesandbox.Panic}})
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		b, err := json.Marshal(rep)
		require.NoError(t, err)
		var back pause.Report
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, rep.Counts, back.Counts)
		assert.Equal(t, len(rep.Entries), len(back.Entries))
		assert.Equal(t, rep.Entries[2].Stack, back.Entries[2].Stack)
		assert.True(t, rep.Deadline.Equal(back.Deadline))
		assert.Contains(t, string(b), `"outcome":"preserved"`)
	})
}

// A Preserve that ignores its context is abandoned a second (AbandonAfter) after its
// sandbox bound and its slot goes to the next sandbox; Run does not wait
// for it.
func TestHangPastItsBoundIsAbandonedAndFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "stuck", Faults: []fakesandbox.Fault{fakesandbox.Hang}},
			&fakesandbox.Sandbox{Name: "next", Latency: time.Second})
		p, err := pause.New(node, pause.Config{Limit: 1, SandboxTimeout: 5 * time.Second})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Hour, 0)
		stuck, next := entry(t, rep, "stuck"), entry(t, rep, "next")
		assert.Equal(t, pause.TimedOut, stuck.Outcome)
		assert.Equal(t, 5*time.Second+pause.AbandonAfter, stuck.Duration)
		assert.Contains(t, stuck.Error, "abandoned")
		assert.True(t, stuck.Abandoned(), "its Duration is the wait for it, not its time")
		assert.Equal(t, pause.Preserved, next.Outcome)
		assert.False(t, next.Abandoned())
		assert.Equal(t, 7*time.Second, took)

		// A Report read back from its JSON (drainkit report, last-shutdown.json) says the same.
		js, err := json.Marshal(rep)
		require.NoError(t, err)
		var back pause.Report
		require.NoError(t, json.Unmarshal(js, &back))
		assert.True(t, entry(t, &back, "stuck").Abandoned())
		time.Sleep(fakesandbox.DefaultHang)
	})
}

// A Preserve that honours its context ends at its bound and is TimedOut
// with the context's error.
func TestSandboxTimeoutBoundsAllAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "slow", Latency: time.Minute},
			&fakesandbox.Sandbox{Name: "retrying", Latency: 2 * time.Second,
				Faults: []fakesandbox.Fault{fakesandbox.Transient, fakesandbox.Transient, fakesandbox.Transient}},
			&fakesandbox.Sandbox{Name: "fast", Latency: time.Second})
		p, err := pause.New(node, pause.Config{SandboxTimeout: 5 * time.Second, BackOff: constant(4 * time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Hour, 0)
		slow := entry(t, rep, "slow")
		assert.Equal(t, pause.TimedOut, slow.Outcome)
		assert.False(t, slow.Abandoned(), "it honoured its context: timed out, not abandoned")
		assert.Equal(t, 5*time.Second, slow.Duration)
		assert.Contains(t, slow.Error, "deadline exceeded")
		// A 2 s try, then a 4 s wait that would end at 6 s, past the 5 s
		// bound: no retry, Failed at 2 s with the last error.
		retrying := entry(t, rep, "retrying")
		assert.Equal(t, pause.Failed, retrying.Outcome)
		assert.Equal(t, 1, retrying.Attempts)
		assert.Equal(t, 2*time.Second, retrying.Duration)
		assert.Contains(t, retrying.Error, "transient")
		assert.Equal(t, pause.Preserved, entry(t, rep, "fast").Outcome)
	})
}

// alwaysTransient is the fault list of a sandbox whose every preserve
// fails with a retryable error.
func alwaysTransient() []fakesandbox.Fault {
	always := make([]fakesandbox.Fault, 100)
	for i := range always {
		always[i] = fakesandbox.Transient
	}
	return always
}

// A Preserve that ignores its context and is abandoned at the hard
// deadline (no SandboxTimeout: the default) is logged at Warn with its
// ID, as one abandoned at its SandboxTimeout, or one that returned
// TimedOut, is: the hung VMM is the sandbox an operator most needs named,
// and before, the log of such a Run said "lost 1" and named no sandbox.
func TestSandboxAbandonedAtTheHardDeadlineIsLoggedByID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "vmm-hung", Faults: []fakesandbox.Fault{fakesandbox.Hang}},
			&fakesandbox.Sandbox{Name: "fine", Latency: time.Second})
		p, err := pause.New(node, pause.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 5*time.Second, 8*time.Second)
		require.Equal(t, pause.TimedOut, entry(t, rep, "vmm-hung").Outcome)
		assert.Regexp(t, `level=WARN msg="pause: sandbox timed_out" sandbox=vmm-hung outcome=timed_out attempts=1 took=8\.\d+s error=".*abandoned"`, logs.String())
		time.Sleep(fakesandbox.DefaultHang)
	})
}

// Fault: a Preserver not made by New (a zero pause.Preserver, or the nil
// *Preserver New returns with its error) panicked with a nil dereference
// in Run, at SIGTERM, and its Estimator was nil where the doc says never.
// Run now lists nothing and returns at once a Report whose sandboxes are
// unknown, its Err saying "pause: Preserver not made by pause.New" (logged
// at Error); the other methods return their zero answers. docs/faults.md
// row 242.
func TestPreserverNotMadeByNewReportsTheSandboxesUnknown(t *testing.T) {
	const want = "pause: Preserver not made by pause.New"
	for name, p := range map[string]*pause.Preserver{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs logbuf.Buffer
				old := slog.Default()
				slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
				defer slog.SetDefault(old)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				start := time.Now()
				rep := p.Run(ctx, start.Add(2*time.Minute))
				require.NotNil(t, rep)
				assert.True(t, rep.Unknown)
				assert.Equal(t, want, rep.ListErr)
				require.ErrorContains(t, rep.Err(), want)
				assert.Equal(t, start, rep.End, "at once")
				assert.Equal(t, start.Add(time.Minute), rep.Deadline)
				assert.Equal(t, start.Add(2*time.Minute), rep.Hard)
				assert.Contains(t, logs.String(), `level=ERROR msg="`+want)

				assert.Zero(t, p.Limit())
				require.NotNil(t, p.Estimator())
				assert.Zero(t, p.Estimator().Estimate())
				_, ok := p.SizeEstimate(1 << 20)
				assert.False(t, ok)
				assert.False(t, p.Tighten(start))
			})
		})
	}
}

// exits is a sandbox whose Preserve ends its goroutine after a second
// (runtime.Goexit: t.FailNow in a test's Preserve, a library that calls
// it): at once, from a deferred call of its own panic, or with a deferred
// call that panics as it goes.
type exits struct{ how string }

func (exits) ID() string { return "exits" }

func (s exits) Preserve(context.Context) error {
	time.Sleep(time.Second)
	switch s.how {
	case "a deferred call of a panic exits":
		defer runtime.Goexit()
		panic("then exits")
	case "a deferred call of the exit panics":
		defer func() { panic("as it exits") }()
	}
	runtime.Goexit()
	return nil
}

// A Preserve that ends its goroutine (runtime.Goexit) has failed its
// sandbox, as one that panics has: its entry says why, with the stack,
// in one line at Warn, and its slot goes to the next sandbox. Its worker
// died with the Preserve and no one settled it: the sandbox after it
// waited for the slot the dead worker held, and the Run for the hard
// deadline, which then called the sandbox timed out.
//
//	Limit 1; a, exits, c of 1 s each; a minute's phase, 70 s hard
//	before: a preserved at 1 s; exits' worker gone at 2 s with its slot;
//	        c not started at 60 s; exits timed out at 70 s, Run back at 70.02 s
//	now:    exits failed at 2 s (its stack: runtime.Goexit); c preserved by 3 s
//	the same when the Goexit is a deferred call of the Preserve's panic,
//	or a deferred call of the Goexit panics (recovered, the Goexit goes on)
func TestAPreserveThatEndsItsGoroutineFailsItsSandbox(t *testing.T) {
	for _, how := range []string{"exits", "a deferred call of a panic exits", "a deferred call of the exit panics"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
				c := &fakesandbox.Sandbox{Name: "c", Latency: time.Second}
				var logs logbuf.Buffer
				p, err := pause.New(listOnce(a, exits{how}, c), pause.Config{Limit: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				require.NoError(t, err)
				rep, took := runFor(t, p, time.Minute, 70*time.Second)
				assert.Equal(t, 3*time.Second, took)
				e := entry(t, rep, "exits")
				assert.Equal(t, pause.Failed, e.Outcome)
				assert.Equal(t, 2*time.Second, e.End.Sub(rep.Start))
				assert.Contains(t, e.Error, "runtime.Goexit")
				assert.Contains(t, e.Stack, "runtime.Goexit")
				assert.Contains(t, e.Stack, "pause_test.exits.Preserve")
				assert.Equal(t, 1, e.Attempts, "not retried")
				assert.Equal(t, 2, rep.Counts[pause.Preserved], "a, and c in the slot exits' worker left")
				assert.Equal(t, 1, strings.Count(logs.String(), "sandbox=exits"), "one line: %s", logs.String())
			})
		})
	}
}
