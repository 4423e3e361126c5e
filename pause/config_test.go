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

func TestNewRejectsBadConfigurationNamingTheField(t *testing.T) {
	node := fakesandbox.NewNode()
	for _, tc := range []struct {
		name  string
		list  pause.Lister
		opts  []pause.Option
		field string
	}{
		{"nil lister", nil, nil, "lister"},
		{"nil ListFunc", pause.ListFunc(nil), nil, "lister"},
		{"limit 0", node, []pause.Option{pause.WithLimit(0)}, "limit must be at least 1"},
		{"max below limit", node, []pause.Option{pause.WithLimit(8), pause.WithMaxLimit(4)}, "max limit 4"},
		{"max limit zero", node, []pause.Option{pause.WithMaxLimit(0)}, "max limit must be at least 1"},
		{"negative timeout", node, []pause.Option{pause.WithSandboxTimeout(-time.Second)}, "sandbox timeout"},
		{"negative progress", node, []pause.Option{pause.WithProgressInterval(-time.Second)}, "progress interval"},
		{"bad order", node, []pause.Option{pause.WithOrder(pause.Order(42))}, "order"},
		{"bad in-flight", node, []pause.Option{pause.WithInFlight(pause.InFlight(7))}, "in-flight policy"},
		{"nil backoff", node, []pause.Option{pause.WithBackOff(nil)}, "backoff"},
		{"nil classifier", node, []pause.Option{pause.WithPermanent(nil)}, "classifier"},
		{"nil tracer provider", node, []pause.Option{pause.WithTracerProvider(nil)}, "tracer provider"},
		{"nil meter provider", node, []pause.Option{pause.WithMeterProvider(nil)}, "meter provider"},
		{"nil logger", node, []pause.Option{pause.WithLogger(nil)}, "logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pause.New(tc.list, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestDefaults(t *testing.T) {
	p, err := pause.New(fakesandbox.NewNode())
	require.NoError(t, err)
	assert.Equal(t, pause.DefaultLimit, p.Limit())
	p, err = pause.New(fakesandbox.NewNode(), pause.WithLimit(3), pause.WithMaxLimit(12))
	require.NoError(t, err)
	assert.Equal(t, 3, p.Limit())
	p, err = pause.New(fakesandbox.NewNode(), pause.WithMaxLimit(2))
	require.NoError(t, err)
	assert.Equal(t, 2, p.Limit(), "a maximum below the default start starts at the maximum")
}

// A long Run logs a progress line every interval: done, left, time left.
func TestProgressIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		node := fakesandbox.NewNode()
		node.AddN("sb", 30, 2*time.Second)
		p, err := pause.New(node, pause.WithLimit(1), pause.WithLogger(log),
			pause.WithProgressInterval(15500*time.Millisecond))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		require.Equal(t, 30, rep.Counts[pause.Preserved])
		var progress []string
		for line := range strings.Lines(buf.String()) {
			if strings.Contains(line, "pause: progress") {
				progress = append(progress, line)
			}
		}
		// Sandboxes finish at even seconds; the lines come in between.
		require.Len(t, progress, 3, "at 15.5, 31 and 46.5 s of a 60 s run")
		assert.Contains(t, progress[0], `msg="pause: progress: preserved 7/30, 0 failed, 59m45s to the preserve deadline"`)
		assert.Contains(t, progress[0], "preserved=7 failed=0 done=7 left=23 time_left=59m44.5s")
		assert.Contains(t, progress[1], "done=15 left=15 time_left=59m29s")
		assert.Contains(t, progress[2], "done=23 left=7 time_left=59m13.5s")
		assert.Contains(t, buf.String(), "pause: run finished")
	})
}

// The progress line counts failures apart, and once the phase deadline
// passed it says how long in-flight preserves have until the hard deadline.
func TestProgressCountsFailuresAndTheHardDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		sbs := node.AddN("sb", 10, 2*time.Second)
		sbs[0].Faults = []fakesandbox.Fault{fakesandbox.Permanent}
		sbs[1].Faults = []fakesandbox.Fault{fakesandbox.Permanent}
		p, err := pause.New(node, pause.WithLimit(1), pause.WithInFlight(pause.FinishInFlight),
			pause.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), pause.WithProgressInterval(5500*time.Millisecond))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 11*time.Second)
		defer cancel()
		rep := p.Run(ctx, time.Now().Add(15*time.Second))
		assert.Equal(t, 2, rep.Counts[pause.Failed])
		out := buf.String()
		// FIFO, one at a time, 2 s each: two failures, then preserves.
		assert.Contains(t, out, `msg="pause: progress: preserved 0/10, 2 failed, 5.5s to the preserve deadline"`)
		// At 11 s: preserved at 6, 8 and 10 s; the sixth started at 10 s, before the
		// deadline, and runs on to 12 s, inside the hard deadline at 15 s.
		assert.Contains(t, out, `msg="pause: progress: preserved 3/10, 2 failed, preserve deadline passed, in-flight preserves have 4s to the hard deadline"`)
	})
}

func TestProgressCanBeTurnedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.AddN("sb", 30, 2*time.Second)
		p, err := pause.New(node, pause.WithLimit(1), pause.WithProgressInterval(0),
			pause.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		require.NoError(t, err)
		p.Run(t.Context(), time.Time{})
		assert.NotContains(t, buf.String(), "pause: progress")
	})
}

func TestFailuresAreLoggedAsWarnings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.Add(&fakesandbox.Sandbox{Name: "bad", Faults: []fakesandbox.Fault{fakesandbox.Permanent}})
		p, err := pause.New(node, pause.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		require.NoError(t, err)
		p.Run(t.Context(), time.Time{})
		assert.Contains(t, buf.String(), `level=WARN msg="pause: sandbox failed" sandbox=bad`)
	})
}
