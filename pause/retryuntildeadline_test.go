package pause_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// volumeAway is a sandbox whose persistence volume is unavailable until
// back: each of its pauses takes a second and fails, transiently, until
// then, and succeeds after.
type volumeAway struct {
	id       string
	back     time.Time
	attempts int
	done     time.Time
}

func (s *volumeAway) ID() string { return s.id }

func (s *volumeAway) Preserve(ctx context.Context) error {
	s.attempts++
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	if time.Now().Before(s.back) {
		return fakesandbox.ErrTransient
	}
	s.done = time.Now()
	return nil
}

// AgentENV's manifest gives the node 3600 s: a preserve phase of 59 min,
// the hard deadline at 60. With Config left zero, a server whose pauses
// fail for 12 min (its persistence volume away) has its sandboxes retried
// until the volume is back, not given up after 5 min of retries:
//
//	0 s       pauses fail (1 s each), retried 200 ms, 300 ms, ... then every ≤ 15 s
//	5 min     the default policy's old bound: every sandbox Failed, 54 min unused
//	12 min    the volume is back: the next retry of each sandbox succeeds
//	≤ 12 min 16 s  both Preserved, Run returns; the phase would have ended at 59 min
func TestDefaultPolicyRetriesAFailingPreserveUntilThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		back := time.Now().Add(12 * time.Minute)
		a, b := &volumeAway{id: "a", back: back}, &volumeAway{id: "b", back: back}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			var left []pause.Sandbox // a Lister lists what still needs preserving
			for _, sb := range []*volumeAway{a, b} {
				if sb.done.IsZero() {
					left = append(left, sb)
				}
			}
			return left, nil
		}), pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, 59*time.Minute, 60*time.Minute)

		for _, sb := range []*volumeAway{a, b} {
			e := entry(t, rep, sb.id)
			assert.Equal(t, pause.Preserved, e.Outcome, "%s: %s after %d attempts", sb.id, e.Error, e.Attempts)
			assert.Empty(t, e.Error)
			assert.Equal(t, sb.attempts, e.Attempts)
			assert.WithinRange(t, sb.done, back, back.Add(16*time.Second), "%s preserved at the first retry after the volume is back", sb.id)
		}
		assert.Less(t, took, 13*time.Minute)
		assert.NoError(t, rep.Err())
	})
}

// The same with the listing: a Lister whose server fails for 12 min is
// listed again until it answers, and its sandboxes preserved, not the Run
// given up Unknown after 5 min with 54 min of its phase left.
func TestDefaultPolicyRetriesAFailingListingUntilThePhaseDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		back := time.Now().Add(12 * time.Minute)
		failed := 0
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			if time.Now().Before(back) {
				failed++
				return nil, fakesandbox.ErrTransient
			}
			return node.List(ctx)
		}), pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, 59*time.Minute, 60*time.Minute)

		assert.False(t, rep.Unknown, "ListErr %q", rep.ListErr)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		for _, sb := range node.Sandboxes() {
			require.NotEmpty(t, sb.Starts(), "%s never listed", sb.Name)
			assert.WithinRange(t, sb.Starts()[0], back, back.Add(16*time.Second), "%s paused once listed, at the first listing after the server is back", sb.Name)
		}
		assert.Less(t, took, 13*time.Minute)
	})
}

// With no deadline at all, nothing but the default policy ends the
// retries: it still gives a sandbox up after 5 min, so the Run ends.
func TestDefaultPolicyWithoutADeadlineGivesUpAfterFiveMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: time.Second, Faults: alwaysTransient()})
		p, err := pause.New(node, pause.Config{})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(context.Background(), time.Time{})
		took := time.Since(start)

		e := entry(t, rep, "broken")
		assert.Equal(t, pause.Failed, e.Outcome)
		assert.Contains(t, e.Error, "transient")
		assert.Greater(t, e.Duration, 4*time.Minute)
		assert.LessOrEqual(t, e.Duration, 5*time.Minute+2*time.Second, "no wait ends past 5 min from the first failure (at 1 s), then a last attempt of 1 s")
		assert.Less(t, took, 6*time.Minute)
	})
}

// volumeHanging is a sandbox whose pauses fail, transiently, while its
// persistence volume is away, and then hang on it: the attempt made after
// failures returns only when its context ends.
type volumeHanging struct{ failures, attempts int }

func (s *volumeHanging) ID() string { return "hung" }

func (s *volumeHanging) Preserve(ctx context.Context) error {
	if s.attempts++; s.attempts <= s.failures {
		time.Sleep(time.Second)
		return fakesandbox.ErrTransient
	}
	<-ctx.Done()
	return ctx.Err()
}

// A sandbox retried after its pauses failed, whose last attempt is cut by
// the hard deadline, is TimedOut with the failure that made it retried,
// not the cut alone: the Report read "context deadline exceeded", as for a
// slow pause, where the server had failed three (row 1760's rule in
// httpsource, kept by pause for every Sandbox):
//
//	0 s     attempts fail (1 s each), retried after 200 ms, 300 ms, 450 ms
//	≈4 s    the fourth attempt hangs
//	1 min   the phase deadline; 2 min the hard deadline cuts it: TimedOut
func TestAttemptCutAfterFailedOnesNamesTheFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sb := &volumeHanging{failures: 3}
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			return []pause.Sandbox{sb}, nil
		}), pause.Config{})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Minute, 2*time.Minute)

		e := entry(t, rep, "hung")
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Equal(t, 4, e.Attempts)
		assert.Contains(t, e.Error, context.DeadlineExceeded.Error(), "the cut")
		assert.Contains(t, e.Error, "the attempt before failed: "+fakesandbox.ErrTransient.Error(), "why it was retried")
		assert.Equal(t, 2*time.Minute, took)
	})
}

// While a sandbox's pauses fail and it waits to be retried, the progress
// line counts it: retried to the phase deadline, up to 59 min of lines
// read "preserved 0/2, 0 failed" and nothing said why nothing moved.
//
//	0 s     both pauses fail (1 s), retried
//	1 min   "preserved 0/2, 0 failed, 2 retrying after a failure, 58m ..."
//	12 min  the volume is back: both preserved; the next line has no retrying
func TestProgressCountsSandboxesRetryingAfterAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		back := time.Now().Add(12 * time.Minute)
		a, b := &volumeAway{id: "a", back: back}, &volumeAway{id: "b", back: back}
		long := &fakesandbox.Sandbox{Name: "long", Latency: 15 * time.Minute} // keeps the Run, and its lines, past 12 min
		p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			var left []pause.Sandbox
			for _, sb := range []*volumeAway{a, b} {
				if sb.done.IsZero() {
					left = append(left, sb)
				}
			}
			if !long.Preserved() {
				left = append(left, long)
			}
			return left, nil
		}), pause.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: time.Minute})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 59*time.Minute, 60*time.Minute)

		assert.Equal(t, 3, rep.Counts[pause.Preserved])
		var progress []string
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "pause: progress") {
				progress = append(progress, line)
			}
		}
		require.GreaterOrEqual(t, len(progress), 14, "every minute to 14 min")
		assert.Contains(t, progress[0], `msg="pause: progress: preserved 0/3, 0 failed, 2 retrying after a failure, 58m0s to the preserve deadline"`)
		assert.Contains(t, progress[0], "retrying=2")
		assert.Contains(t, progress[10], "2 retrying after a failure", "at 11 min")
		for _, line := range progress[12:14] { // 13 and 14 min
			assert.Contains(t, line, "preserved 2/3, 0 failed, 4")
			assert.NotContains(t, line, "retrying", "once both are preserved")
		}
	})
}
