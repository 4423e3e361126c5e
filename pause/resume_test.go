package pause_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// resumedAt lists the node's sandboxes, and from listing n on resumes the
// sandbox sb before it when it is preserved (node.Add): a user resumed it
// after its preserve (a server the drain's gate does not close, such as
// AgentENV behind the supervisor), so it runs and needs preserving again;
// until, with resumes > 0, the user stopped resuming it.
func resumedAt(node *fakesandbox.Node, sb *fakesandbox.Sandbox, n, resumes int) pause.Lister {
	listings := 0
	return pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		if listings++; listings >= n && (resumes == 0 || listings < n+resumes) && sb.Preserved() {
			node.Add(sb)
		}
		return node.List(ctx)
	})
}

// A sandbox resumed after its preserve is listed again by the next pass
// and preserved again: the Report says preserved because it is, and its
// entry says it was listed again. Before, a sandbox was preserved at most
// once per Run: the Report said preserved and the sandbox ran on, lost at
// SIGKILL (docs/faults.md entry 93).
//
//	0 s   pass 1: a, b, c, 1 s each           1 s  all three preserved
//	      the user resumes b
//	1 s   pass 2: b listed again: preserved again  2 s
//	2 s   only b was listed again: wait the backoff (1 s) before listing
//	3 s   pass 3: nothing; the Run ends
func TestSandboxResumedAfterItsPreserveIsPreservedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		sbs := node.AddN("sb", 3, time.Second)
		b := sbs[1]
		var logs bytes.Buffer
		p, err := pause.New(resumedAt(node, b, 2, 1), pause.Config{BackOff: constant(time.Second),
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		start := time.Now()
		rep, took := runFor(t, p, time.Minute, 0)

		assert.Equal(t, 3*time.Second, took)
		assert.Equal(t, 3, rep.Passes)
		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		assert.NoError(t, rep.Err())
		e := entry(t, rep, b.Name)
		assert.Equal(t, pause.Preserved, e.Outcome)
		assert.Equal(t, 1, e.Relisted)
		assert.Equal(t, 2, e.Attempts, "one Preserve call for each time it ran")
		assert.Equal(t, 1, e.Pass, "the pass that first listed it")
		assert.Equal(t, start.Add(time.Second), e.Start, "the start of its last preserve")
		assert.Equal(t, time.Second, e.Duration)
		assert.Equal(t, []time.Time{start, start.Add(time.Second)}, b.Starts())
		assert.Contains(t, logs.String(), `level=WARN msg="pause: sandboxes listed again after their preserve (resumed, or the listing lags); preserving them again" pass=2 again=1 first=sb-1`)
		for _, id := range []string{"sb-0", "sb-2"} {
			assert.Zero(t, entry(t, rep, id).Relisted, id)
			assert.Equal(t, 1, entry(t, rep, id).Attempts, id)
		}
	})
}

// A user who resumes a sandbox as soon as it is preserved, again and
// again, cannot keep the Run going: passes that find only sandboxes listed
// again are spaced by the backoff, and no pass starts after the phase
// deadline.
//
//	0 s  pass 1: x preserved (1 s)   1 s  pass 2: x again (1 s)
//	2 s  wait 1 s; 3 s pass 3 ... 9 s pass 6: x again, 10 s
//	10 s the phase deadline: no wait ends before it, the Run ends
func TestUserResumingInALoopCannotHoldTheRunPastThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		x := node.AddN("x", 1, time.Second)[0]
		p, err := pause.New(resumedAt(node, x, 2, 0), pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, 10*time.Second, 20*time.Second)

		assert.Equal(t, 10*time.Second, took)
		assert.Equal(t, 6, rep.Passes)
		e := entry(t, rep, x.Name)
		assert.Equal(t, 5, e.Relisted)
		assert.Equal(t, 6, x.Attempts())
		assert.Equal(t, pause.Preserved, e.Outcome)
	})
}

// With no deadline at all, a Lister that keeps listing a preserved sandbox
// (one that breaks the Lister's contract, or a user resuming forever) still
// lets the Run end: the default backoff between such passes stops within 5
// minutes.
func TestRelistingWithoutADeadlineEndsWhenTheBackoffStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &fakesandbox.Sandbox{Name: "static", Latency: time.Second}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			return []pause.Sandbox{sb}, nil
		}), pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(context.Background(), time.Time{})
		took := time.Since(start)

		assert.Greater(t, took, 4*time.Minute, "the policy's waits grow to 10 s")
		assert.LessOrEqual(t, took, 5*time.Minute+3*time.Second, "two passes, then no wait ends past the policy's 5 minutes, then one last pass")
		assert.Equal(t, pause.Preserved, entry(t, rep, "static").Outcome)
		assert.Equal(t, rep.Passes-1, entry(t, rep, "static").Relisted)
	})
}

// A preserve again that says the sandbox is already preserved (ErrGone: a
// listing that lagged the pause) leaves it preserved, not vanished; and a
// sandbox that failed is not preserved again when a later pass lists it:
// it is counted lost already.
func TestPreserveAgainThatFindsItPreservedKeepsItPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		lagged := &fakesandbox.Sandbox{Name: "lagged", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.OK, fakesandbox.Vanish}}
		failed := &fakesandbox.Sandbox{Name: "failed", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Permanent}}
		node.Add(lagged, failed)
		p, err := pause.New(resumedAt(node, lagged, 2, 1), pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)

		e := entry(t, rep, "lagged")
		assert.Equal(t, pause.Preserved, e.Outcome)
		assert.Equal(t, 1, e.Relisted)
		assert.Equal(t, 2, e.Attempts)
		assert.Equal(t, pause.Failed, entry(t, rep, "failed").Outcome)
		assert.Equal(t, 1, failed.Attempts(), "listed again by every pass, never preserved again")
		assert.Equal(t, 1, rep.Lost())
	})
}

// laggedSandbox is a sandbox of a server whose listing lags its pauses: a
// preserve of it once preserved is a round trip that says so (ErrGone).
type laggedSandbox struct{ *fakesandbox.Sandbox }

func (s laggedSandbox) Preserve(ctx context.Context) error {
	if s.Preserved() {
		time.Sleep(5 * time.Millisecond)
		return pause.ErrGone
	}
	return s.Sandbox.Preserve(ctx)
}

// A listing that lags the pauses lists every sandbox of a large node once
// more; their preserves again are round trips of milliseconds ("already
// preserved"), which say nothing of how fast the disk preserves. They must
// not feed the adaptive limit: before, each was a sample of a preserve
// hundreds of times faster than the level's, and the limit climbed to the
// ceiling and was handed on as the level learned (docs/faults.md entry 97).
func TestPreservesAgainDoNotFeedTheAdaptiveLimit(t *testing.T) {
	run := func(lag bool) (*pause.Report, []string) {
		var rep *pause.Report
		var buf bytes.Buffer
		synctest.Test(t, func(t *testing.T) {
			disk := &fakesandbox.Disk{Bandwidth: 64 * mib, PerWriter: 16 * mib}
			var all []pause.Sandbox
			node := diskNode(disk, 200, 16)
			list, err := node.List(t.Context())
			require.NoError(t, err)
			for _, sb := range list {
				all = append(all, laggedSandbox{sb.(*fakesandbox.Sandbox)})
			}
			listings := 0
			p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
				listings++
				if listings == 1 || lag && listings == 2 {
					return all, nil
				}
				return nil, nil
			}), pause.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), BackOff: constant(time.Second)})
			require.NoError(t, err)
			rep, _ = runFor(t, p, time.Hour, 0)
			require.Equal(t, 200, rep.Counts[pause.Preserved])
		})
		return rep, limitsTaken(buf.String())
	}
	want, wantLimits := run(false)
	got, gotLimits := run(true)
	for _, e := range got.Entries {
		require.Equal(t, 1, e.Relisted, "every sandbox listed again once: %s", e.ID)
	}
	t.Logf("limits taken: %v without the lagging listing, %v with it", wantLimits, gotLimits)
	assert.LessOrEqual(t, slices.Max(atoi(t, gotLimits)), slices.Max(atoi(t, wantLimits)), "no limit above those a Run without it probed")
	assert.Equal(t, want.LearnedLimit, got.LearnedLimit, "the level handed on")
}

// A sandbox listed again whose preserve again never starts (the phase
// deadline came first) is lost, and its entry says it never started: no
// Start, no Duration, as the Entry's fields say of one that never started.
// Before, it kept the Start and the Duration of its first preserve beside
// the outcome not_started, and a Duration that was not End - Start
// (docs/faults.md entry 99).
//
//	0 s   pass 1: a (1 s), limit 1        1 s  a preserved; the user resumes it
//	1 s   pass 2: c (new, 10 s), then a again: c runs to 11 s
//	5 s   the phase deadline: a's preserve again never started
func TestSandboxListedAgainAndNotPreservedAgainSaysItNeverStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &fakesandbox.Sandbox{Name: "a", Latency: time.Second}
		c := &fakesandbox.Sandbox{Name: "c", Latency: 10 * time.Second}
		listings := 0
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			switch listings++; listings {
			case 1:
				return []pause.Sandbox{a}, nil
			case 2:
				return []pause.Sandbox{c, a}, nil
			}
			return nil, nil
		}), pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 5*time.Second, 20*time.Second)

		e := entry(t, rep, "a")
		assert.Equal(t, pause.NotStarted, e.Outcome)
		assert.Equal(t, 1, e.Relisted)
		assert.Equal(t, 1, a.Attempts(), "never preserved again")
		assert.True(t, e.Start.IsZero(), "no start: its last preserve never started, got %v", e.Start)
		assert.Zero(t, e.Duration, "zero if never started")
		assert.Equal(t, pause.Preserved, entry(t, rep, "c").Outcome)
		assert.Equal(t, 1, rep.Lost())
	})
}

func atoi(t *testing.T, ss []string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		out[i] = n
	}
	return out
}

// comeback is a sandbox that was gone when its first preserve came (its
// server had stopped it) and ran again by the next listing (a user
// restarted it): its second preserve succeeds.
type comeback struct{ calls int }

func (c *comeback) ID() string { return "comeback" }
func (c *comeback) Preserve(context.Context) error {
	if c.calls++; c.calls == 1 {
		return pause.ErrGone
	}
	return nil
}

// A sandbox preserved again after its first preserve found it gone has the
// account of its last preserve: preserved, with no error. Before, its entry
// kept the first preserve's "gone" error beside the outcome preserved.
func TestPreserveAgainReplacesTheErrorOfTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &comeback{}
		listings := 0
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			if listings++; listings <= 2 {
				return []pause.Sandbox{sb}, nil
			}
			return nil, nil
		}), pause.Config{BackOff: constant(time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)

		e := entry(t, rep, "comeback")
		assert.Equal(t, 2, sb.calls)
		assert.Equal(t, pause.Preserved, e.Outcome)
		assert.Equal(t, 1, e.Relisted)
		assert.Empty(t, e.Error, "the error of the preserve before")
		assert.NoError(t, rep.Err())
	})
}
