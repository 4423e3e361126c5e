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

// progressLines returns the progress lines logged in out.
func progressLines(out string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "pause: progress") {
			lines = append(lines, line)
		}
	}
	return lines
}

// While the first listing has not answered, the progress line says so,
// where it said "preserved 0/0", the line of a node with no sandboxes.
func TestProgressSaysTheListingHasNotAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		hung := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		p, err := pause.New(hung, pause.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: 10 * time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Empty(t, rep.Entries)
		lines := progressLines(buf.String())
		require.Len(t, lines, 2, "at 10 and 20 s")
		assert.Contains(t, lines[0], `msg="pause: progress: listing: no answer yet after 10s, 15s to the preserve deadline"`)
		assert.Contains(t, lines[0], "listing_for=10s")
		assert.Contains(t, lines[1], `msg="pause: progress: listing: no answer yet after 20s, 5s to the preserve deadline"`)
		assert.NotContains(t, buf.String(), "0/0")
	})
}

// A listing that failed and is retried has answered: the line counts its
// failed attempts.
func TestProgressCountsTheListingsFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
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
		p, err := pause.New(flaky, pause.Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: 5500 * time.Millisecond,
			BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		lines := progressLines(buf.String())
		require.NotEmpty(t, lines)
		// Attempts fail at 2 and 5 s (2 s each, 1 s apart); the third runs at 5.5 s.
		assert.Contains(t, lines[0], `msg="pause: progress: listing: no sandboxes listed yet after 5.5s, 2 attempts failed, 55s to the preserve deadline"`)
		assert.Contains(t, lines[0], "listing_for=5.5s listing_failed=2")
		assert.NotContains(t, buf.String(), "0/0")
	})
}

// A later pass's listing that hangs is named beside the counts so far.
func TestProgressNamesALaterListingThatHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
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
		p, err := pause.New(lister, pause.Config{Limit: 2, Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: 10 * time.Second})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		lines := progressLines(buf.String())
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
		var buf bytes.Buffer
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
		p, err := pause.New(lister, pause.Config{Limit: 2, Logger: slog.New(slog.NewTextHandler(&buf, nil)), ProgressInterval: 10 * time.Second,
			BackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		assert.Equal(t, 2, rep.Counts[pause.Preserved])
		lines := progressLines(buf.String())
		require.Len(t, lines, 2, "at 10 and 20 s")
		// Preserved at 1 s, listed again from then: attempts fail at 3 and 6 s, the third hangs from 7 s.
		assert.Contains(t, lines[0], `msg="pause: progress: preserved 2/2, 0 failed, listing again: nothing listed yet after 9s, 2 attempts failed, 15s to the preserve deadline"`)
		assert.NotContains(t, buf.String(), "no answer yet")
	})
}
