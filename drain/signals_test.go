package drain

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
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

// The Report says what began the shutdown and every signal that came
// while it ran: the kubelet's SIGTERM, its SIGTERM again (a shortened
// grace), a person's SIGINT that forced it. Before, the Report named no
// signal at all: a drain a person began with Ctrl-C read like the
// kubelet's.
func TestReportNamesTheSignalsThatCame(t *testing.T) {
	var logs logbuf.Buffer
	stepStarted := make(chan struct{})
	f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 1, latency: time.Millisecond,
		edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) },
		steps: []Step{step("hang", 10*time.Millisecond, func(ctx context.Context) error {
			close(stepStarted)
			<-ctx.Done() // only force ends it
			return context.Cause(ctx)
		})}})
	sigs := make(chan os.Signal) // unbuffered: each is taken before the next is sent
	done := make(chan *Report, 1)
	go func() { done <- f.d.ServeSignals(context.Background(), sigs) }()
	sigs <- syscall.SIGTERM
	<-stepStarted
	sigs <- syscall.SIGTERM
	sigs <- syscall.SIGINT
	rep := <-done

	assert.Equal(t, "SIGTERM", rep.Cause)
	var names []string
	for _, s := range rep.Signals {
		names = append(names, s.Name)
		assert.False(t, s.At.Before(rep.Signals[0].At))
	}
	assert.Equal(t, []string{"SIGTERM", "SIGTERM", "SIGINT"}, names)
	assert.True(t, rep.Forced, "the SIGINT forced")
	js, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"cause":"SIGTERM","signals":[{"name":"SIGTERM"`)
	assert.Contains(t, logs.String(), `report.cause=SIGTERM report.signals="SIGTERM SIGTERM SIGINT"`)
}

// A shutdown its context began says why, and a process signalled in a
// loop keeps the first signals only.
func TestReportNamesTheContextsCauseAndKeepsSixteenSignals(t *testing.T) {
	f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 1, latency: time.Millisecond})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("the server stopped serving"))
	rep := f.d.ServeSignals(ctx, make(chan os.Signal))
	assert.Equal(t, "the server stopped serving", rep.Cause)
	assert.Empty(t, rep.Signals)
	assert.False(t, rep.Forced, "the context began the shutdown: it forces nothing")

	stepStarted := make(chan struct{})
	f = newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 1, latency: time.Millisecond,
		steps: []Step{step("hang", 10*time.Millisecond, func(ctx context.Context) error {
			close(stepStarted)
			<-ctx.Done()
			return context.Cause(ctx)
		})}})
	sigs := make(chan os.Signal)
	done := make(chan *Report, 1)
	go func() { done <- f.d.ServeSignals(context.Background(), sigs) }()
	sigs <- os.Interrupt
	<-stepStarted
	for range 40 {
		sigs <- syscall.SIGTERM
	}
	sigs <- os.Interrupt
	rep = <-done
	assert.Equal(t, "SIGINT", rep.Cause)
	assert.Len(t, rep.Signals, maxSignals)
}

// The plan logged when the shutdown begins says what began it when that
// was no SIGTERM (the line reads "drain: SIGTERM: plan": a review took a
// person's Ctrl-C for the kubelet's).
func TestPlanLineSaysAnInterruptBeganIt(t *testing.T) {
	var logs logbuf.Buffer
	f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 1, latency: time.Millisecond,
		edit: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	sigs := make(chan os.Signal, 1)
	sigs <- os.Interrupt
	f.d.ServeSignals(context.Background(), sigs)
	assert.Regexp(t, `msg="drain: SIGTERM: plan" .* cause=SIGINT`, logs.String())
}

// ServeSignals' ctx ending starts the shutdown, as a first signal does (a
// server's own reason to drain: its serving stopped), and never forces it:
// the shutdown runs with ctx's values but not its cancellation, so the
// ctx that started it cannot cut it short. Only a signal after the first
// (not SIGTERM) or Force forces. Its doc said cancelling ctx forces, as
// cancelling Shutdown's own ctx does: a caller that cancelled it to end a
// drain early got the whole drain, its step held to the deadline.
func TestServeSignalsCtxStartsTheShutdownAndNeverForcesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stepStarted := make(chan struct{})
		f := newFixture(t, fixtureOpts{grace: 600 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Millisecond,
			steps: []Step{step("hang", 10*time.Millisecond, func(ctx context.Context) error {
				close(stepStarted)
				<-ctx.Done() // only its deadline, or force, ends it
				return context.Cause(ctx)
			})}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *Report, 1)
		go func() { done <- f.d.ServeSignals(ctx, make(chan os.Signal)) }()
		synctest.Wait()
		select {
		case <-f.d.Terminating():
			t.Fatal("the shutdown started with no signal and ctx alive")
		default:
		}
		cancel()
		<-stepStarted
		synctest.Wait()
		select {
		case <-f.d.Forced():
			t.Fatal("the ctx that started the shutdown forced it")
		default:
		}
		rep := <-done
		assert.False(t, rep.Forced)
		assert.Equal(t, TimedOut, rep.Phase("hang").Result, "the step ran to its deadline")
		assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
	})
}

// A relay that closes its channel when it is done (a goroutine that
// forwards signal.Notify's signals until its context ends, the context
// signal.NotifyContext cancels at the very SIGTERM it relays) has no
// signal more to give: the shutdown the SIGTERM started runs on, its step
// to its deadline, not forced, and a channel closed before any signal
// starts nothing (ctx does). Before, the closed channel's zero value was
// taken for a signal: naming it (nil) panicked, in ServeSignals' own
// goroutine during the shutdown, which ended the process mid-drain, its
// sandboxes, and its ublk daemon's devices, left as they were at that
// moment.
//
//	+0      SIGTERM relayed: the shutdown starts
//	        the step runs; the relay closes its channel
//	+55 s   the step's deadline (grace 60 s, margin 5 s): TimedOut, not forced
func TestServeSignalsOverAClosedChannelForcesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stepStarted := make(chan struct{})
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Millisecond,
			steps: []Step{step("hang", 10*time.Millisecond, func(ctx context.Context) error {
				close(stepStarted)
				<-ctx.Done() // only its deadline, or force, ends it
				return context.Cause(ctx)
			})}})
		relay := make(chan os.Signal)
		done := make(chan *Report, 1)
		start := time.Now()
		go func() { done <- f.d.ServeSignals(context.Background(), relay) }()
		relay <- syscall.SIGTERM
		<-stepStarted
		close(relay)
		rep := <-done
		assert.False(t, rep.Forced, "a closed channel is no signal")
		assert.Equal(t, TimedOut, rep.Phase("hang").Result, "the step ran to its deadline")
		assert.Equal(t, 55*time.Second, time.Since(start).Round(time.Second))
		require.Len(t, rep.Signals, 1)
		assert.Equal(t, "SIGTERM", rep.Signals[0].Name)
		assert.Equal(t, 2, rep.Preserve.Counts["preserved"])
	})
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 1, latency: time.Millisecond})
		ctx, cancel := context.WithCancelCause(context.Background())
		sigs := make(chan os.Signal)
		close(sigs)
		done := make(chan *Report, 1)
		go func() { done <- f.d.ServeSignals(ctx, sigs) }()
		synctest.Wait()
		select {
		case <-f.d.Terminating():
			t.Fatal("a closed channel started the shutdown")
		default:
		}
		cancel(errors.New("the server stopped serving"))
		rep := <-done
		assert.Equal(t, "the server stopped serving", rep.Cause)
		assert.Empty(t, rep.Signals)
		assert.False(t, rep.Forced)
	})
}
