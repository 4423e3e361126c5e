package drain

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
)

// HandleSignals with real signals to this process: the first SIGTERM starts
// the shutdown, a SIGTERM again does not force it (the kubelet's own: see
// ServeSignals), a SIGINT does, and the process is never exited.
func TestHandleSignalsFirstStartsSIGINTForces(t *testing.T) {
	guard := make(chan os.Signal, 64) // keeps SIGTERM and SIGINT from killing the test binary meanwhile
	signal.Notify(guard, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(guard)

	stepStarted := make(chan struct{})
	var logs logbuf.Buffer
	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Millisecond,
		edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) },
		steps: []Step{step("hang", 10*time.Millisecond, func(ctx context.Context) error {
			close(stepStarted)
			<-ctx.Done() // its deadline is minutes away: only force ends it
			return context.Cause(ctx)
		})}})
	done := make(chan *Report, 1)
	go func() { done <- f.d.HandleSignals(context.Background()) }()

	// HandleSignals registers asynchronously: signal until it has started,
	// one signal at a time. Each is seen delivered (guard gets every one)
	// before the next is sent, and a registered HandleSignals starts the
	// shutdown within the wait, so no extra signal is queued to force it.
	for started := false; !started; {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
		<-guard
		select {
		case <-f.d.Terminating():
			started = true
		case <-time.After(time.Second):
		}
	}
	<-stepStarted
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	<-guard // HandleSignals has it too (the same delivery), before the SIGINT
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	var rep *Report
	select {
	case rep = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("SIGINT did not force the shutdown")
	}
	assert.True(t, rep.Forced)
	again := strings.Index(logs.String(), `level=INFO msg="drain: SIGTERM during the shutdown: not forcing: `)
	forced := strings.Index(logs.String(), `msg="drain: forced: `)
	assert.True(t, again >= 0 && forced > again, "the SIGTERM again logged, the SIGINT forced after it:\n%s", logs.String())
	assert.Equal(t, TimedOut, rep.Phase("hang").Result)
	assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
}

// The first Force is logged at Warn, once: an operator's second Ctrl-C or
// SIGTERM was acknowledged by no line until the Report (forced_at).
func TestForceIsLoggedOnce(t *testing.T) {
	var logs logbuf.Buffer
	f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 1, latency: time.Millisecond,
		edit: func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}})
	f.d.Force()
	f.d.Force()
	assert.Equal(t, 1, strings.Count(logs.String(), `level=WARN msg="drain: forced: `), logs.String())
	assert.Contains(t, logs.String(), "terminating=false")
}
