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
		assert.Contains(t, progress[0], "done=7 left=23 time_left=59m44.5s")
		assert.Contains(t, progress[1], "done=15 left=15 time_left=59m29s")
		assert.Contains(t, progress[2], "done=23 left=7 time_left=59m13.5s")
		assert.Contains(t, buf.String(), "pause: run finished")
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
