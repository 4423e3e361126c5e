package pause_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// runLogged runs a Preserver over lister with cfg, its Logger a text handler, for
// left, and returns the Report, the progress lines it logged and all it logged.
func runLogged(t *testing.T, lister pause.Lister, cfg pause.Config, left time.Duration) (*pause.Report, []string, string) {
	t.Helper()
	var buf bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	p, err := pause.New(lister, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), left)
	defer cancel()
	rep := p.Run(ctx, time.Time{})
	var lines []string
	for line := range strings.Lines(buf.String()) {
		if strings.Contains(line, "pause: progress") {
			lines = append(lines, line)
		}
	}
	return rep, lines, buf.String()
}

// While the first listing has not answered, the progress line says so,
// where it said "preserved 0/0", the line of a node with no sandboxes.
func TestProgressSaysTheListingHasNotAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		rep, lines, out := runLogged(t, hung, pause.Config{ProgressInterval: 10 * time.Second}, 25*time.Second)
		assert.Empty(t, rep.Entries)
		require.Len(t, lines, 2, "at 10 and 20 s")
		assert.Contains(t, lines[0], `msg="pause: progress: listing: no answer yet after 10s, 15s to the preserve deadline"`)
		assert.Contains(t, lines[0], "listing_for=10s")
		assert.Contains(t, lines[1], `msg="pause: progress: listing: no answer yet after 20s, 5s to the preserve deadline"`)
		assert.NotContains(t, out, "0/0")
	})
}

// A listing that failed and is retried has answered: the line counts its
// failed attempts.
func TestProgressCountsTheListingsFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		flaky := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			if calls.Add(1) <= 3 {
				time.Sleep(2 * time.Second)
				return nil, errors.New("apiserver: connection refused")
			}
			return node.List(ctx)
		})
		rep, lines, out := runLogged(t, flaky, pause.Config{ProgressInterval: 5500 * time.Millisecond,
			BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }}, time.Minute)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		require.NotEmpty(t, lines)
		// Attempts fail at 2 and 5 s (2 s each, 1 s apart); the third runs at 5.5 s.
		assert.Contains(t, lines[0], `msg="pause: progress: listing: no sandboxes listed yet after 5.5s, 2 attempts failed, 55s to the preserve deadline"`)
		assert.Contains(t, lines[0], "listing_for=5.5s listing_failed=2")
		assert.NotContains(t, out, "0/0")
	})
}

// A later pass's listing that hangs is named beside the counts so far.
func TestProgressNamesALaterListingThatHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			if calls.Add(1) == 1 {
				return node.List(ctx)
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
		rep, lines, _ := runLogged(t, lister, pause.Config{Limit: 2, ProgressInterval: 10 * time.Second}, 25*time.Second)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		require.Len(t, lines, 2, "at 10 and 20 s")
		// Preserved at 1 s, listed again from then.
		assert.Contains(t, lines[0], `msg="pause: progress: preserved 2/2, 0 failed, listing again: no answer yet after 9s, 15s to the preserve deadline"`)
	})
}

// A later pass's listing whose attempts failed has answered, with errors: the line
// counts them beside words that say nothing was listed yet, not "no answer yet", as
// the first listing's line does.
func TestProgressCountsALaterListingsFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		node := fakesandbox.NewNode()
		node.AddN("sb", 2, time.Second)
		lister := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			switch calls.Add(1) {
			case 1:
				return node.List(ctx)
			case 2, 3:
				time.Sleep(2 * time.Second)
				return nil, errors.New("apiserver: connection refused")
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
		rep, lines, out := runLogged(t, lister, pause.Config{Limit: 2, ProgressInterval: 10 * time.Second,
			BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }}, 25*time.Second)
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		require.Len(t, lines, 2, "at 10 and 20 s")
		// Preserved at 1 s, listed again from then: attempts fail at 3 and 6 s, the third hangs from 7 s.
		assert.Contains(t, lines[0], `msg="pause: progress: preserved 2/2, 0 failed, listing again: nothing listed yet after 9s, 2 attempts failed, 15s to the preserve deadline"`)
		assert.NotContains(t, out, "no answer yet")
	})
}
