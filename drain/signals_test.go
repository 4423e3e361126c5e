package drain

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// HandleSignals with real signals to this process: the first SIGTERM starts
// the shutdown, a later one forces it, and the process is never exited.
func TestHandleSignalsFirstStartsSecondForces(t *testing.T) {
	guard := make(chan os.Signal, 64) // keeps SIGTERM from killing the test binary meanwhile
	signal.Notify(guard, syscall.SIGTERM)
	defer signal.Stop(guard)

	stepStarted := make(chan struct{})
	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Millisecond,
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
	var rep *Report
	select {
	case rep = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second SIGTERM did not force the shutdown")
	}
	assert.True(t, rep.Forced)
	assert.Equal(t, TimedOut, rep.Phase("hang").Result)
	assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
}
