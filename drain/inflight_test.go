package drain

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A create the gate admitted just before SIGTERM (a VM that boots slowly)
// outlives the gate phase's wait, which the plan ends so that the preserve
// phase keeps its reserve. Before, the sandbox it started after the
// Preserver's last listing ran on until SIGKILL and the Report said 2 of 2
// preserved, exit 0. Now the preserve phase waits for it within its
// deadline and preserves what it started; one still in flight at the
// deadline fails the phase, naming it.
//
//	0 s     create admitted (boots for `boot`); SIGTERM, no preStop: grace 4 s,
//	        budget deadline 2.5 s (margin 1.5 s), preserve deadline 2.25 s (http 250 ms)
//	1.25 s  gate wait ends (preserve reserves 2 rounds of 500 ms): timed_out
//	1.45 s  the two sandboxes preserved (100 ms each); the listing finds nothing
//	boot    the create's sandbox starts running
func TestSandboxOfACreateInFlightPastTheGateWaitIsPreservedOrFailsThePhase(t *testing.T) {
	for _, c := range []struct {
		name      string
		boot      time.Duration
		preserved bool
	}{
		{"boots before the preserve deadline", 1800 * time.Millisecond, true},
		{"boots after it", 2400 * time.Millisecond, false},
		// The wait for it gives up at the very instant it ends: counted
		// after, it was no longer in flight, and the phase said OK of a
		// sandbox nothing listed.
		{"boots at it", 2250 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, fixtureOpts{grace: 4 * time.Second, sandboxes: 2, latency: 100 * time.Millisecond,
					limit: 1, steps: []Step{step("http", 250*time.Millisecond, func(context.Context) error { return nil })},
					edit: func(cfg *Config) { cfg.Pause.Estimator = deadline.NewEstimator(500 * time.Millisecond) }})
				leave, err := f.d.Gate().Enter(Create)
				require.NoError(t, err)
				booted := make(chan struct{})
				go func() {
					defer close(booted)
					time.Sleep(c.boot) // the VM boots
					f.node.Add(&fakesandbox.Sandbox{Name: "booted-late", Latency: 50 * time.Millisecond})
					leave()
				}()
				sigs := make(chan os.Signal, 1)
				sigs <- syscall.SIGTERM
				rep := f.d.ServeSignals(t.Context(), sigs)
				<-booted // by SIGKILL (4 s) at the latest

				assert.Equal(t, TimedOut, rep.Phase(PhaseGate).Result, "the gate wait ended at its deadline")
				require.NotNil(t, rep.Preserve)
				left, err := f.node.List(context.Background())
				require.NoError(t, err)
				if c.preserved {
					assert.Empty(t, left, "the create's sandbox was preserved")
					assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
					assert.NoError(t, rep.Err())
					return
				}
				assert.Len(t, left, 1, "it booted at or after the preserve deadline: nothing could preserve it")
				require.Error(t, rep.Err(), "a sandbox running at SIGKILL fails the shutdown")
				assert.Equal(t, Failed, rep.Phase(PhasePreserve).Result)
				if c.boot == 2250*time.Millisecond {
					return // which of the two ends first at that instant says how it failed
				}
				assert.Contains(t, rep.Err().Error(), "gated operations admitted before the gate closed still in flight when the preserve phase ended (its deadline, or force): create: 1")
				assert.Equal(t, Failed, rep.Phase(PhasePreserve).Result)
				assert.Contains(t, rep.Err().Error(), "is a drain.Stream, not a create", "a stream admitted as a create is told apart")
			})
		})
	}
}

// Only the classes that start a sandbox (Create, Resume, Fork) are waited
// for after the Preserver returned: a long-lived gated operation of another
// class (a keep-alive stream) still in flight past the gate wait neither
// holds the preserve phase to its deadline nor fails it.
func TestOtherGatedOperationsInFlightDoNotHoldThePreservePhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 4 * time.Second, sandboxes: 2, latency: 100 * time.Millisecond,
			limit: 1, edit: func(cfg *Config) { cfg.Pause.Estimator = deadline.NewEstimator(500 * time.Millisecond) }})
		leave, err := f.d.Gate().Enter(KeepAlive)
		require.NoError(t, err)
		defer leave()
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		rep := f.d.ServeSignals(t.Context(), sigs)

		assert.Equal(t, TimedOut, rep.Phase(PhaseGate).Result)
		p := rep.Phase(PhasePreserve)
		assert.Equal(t, OK, p.Result, p.Error)
		assert.Less(t, p.Duration, 300*time.Millisecond, "it ended with its preserves, not at its deadline")
		require.NoError(t, rep.Err())
	})
}

// A stream (a log follow that lasts as long as its client) admitted as a
// Stream holds neither the gate wait nor the preserve phase, and ends when
// the preserve phase does, so that the server's shutdown step, which
// waits for the requests still open, ends at once. Before, the one-call
// path offered only Create (Server.Admit): the stream held the gate wait to
// its deadline and the preserve phase to its own, failed it ("create: 1
// still in flight"), and the server's step waited for it until its
// deadline.
//
//	0 s     stream open; SIGTERM, no preStop: grace 4 s, preserve deadline 2.25 s
//	0 s     gate: nothing to wait for
//	0.2 s   the two sandboxes preserved (100 ms each, one at a time); the stream ends
//	0.2 s   http: the stream's handler has returned
func TestAStreamHoldsNoWaitAndEndsWithThePreservePhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handled := make(chan struct{})
		f := newFixture(t, fixtureOpts{grace: 4 * time.Second, sandboxes: 2, latency: 100 * time.Millisecond, limit: 1,
			steps: []Step{step("http", 250*time.Millisecond, func(ctx context.Context) error {
				select { // as srv.Shutdown waits for the requests still open
				case <-handled:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})}})
		var cause error
		follow := f.d.Gate().Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for {
				_, _ = io.WriteString(w, "a log line\n")
				select {
				case <-r.Context().Done():
					cause = context.Cause(r.Context())
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}))
		go func() {
			defer close(handled)
			follow.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/sandboxes/sb-0/logs?follow=1", nil))
		}()
		synctest.Wait()
		require.Equal(t, 1, f.d.Gate().InFlight(Stream))

		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		rep := f.d.ServeSignals(t.Context(), sigs)

		g := rep.Phase(PhaseGate)
		assert.Equal(t, OK, g.Result, g.Error)
		assert.Zero(t, g.Duration, "nothing to wait for")
		p := rep.Phase(PhasePreserve)
		assert.Equal(t, OK, p.Result, p.Error)
		assert.Less(t, p.Duration, 300*time.Millisecond, "it ended with its preserves, not at its deadline")
		h := rep.Phase("http")
		assert.Equal(t, OK, h.Result, h.Error)
		assert.Zero(t, h.Duration, "the stream had ended")
		require.NoError(t, rep.Err())
		assert.ErrorIs(t, cause, ErrDraining)
		rec := httptest.NewRecorder()
		follow.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/sandboxes/sb-1/logs?follow=1", nil))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "no new stream on a draining node")
	})
}

// Fault: a Stream its holder admitted with Gate.Enter itself (a websocket
// handler that hijacks its connection, a transport of its own: not Admit,
// Middleware nor draingrpc) was never told to end: Enter's doc said "its
// server's shutdown ends it", but nothing said when, so the server's step
// waited for it until its deadline (a hijacked connection, which
// http.Server.Shutdown does not wait for, ran on to the process's end)
// and the drain failed with every sandbox preserved. The gate now says
// when: StreamsEnded's channel closes as the preserve phase ends, the
// moment its HTTP and gRPC streams end, and Enter refuses a Stream from
// then on, exempt or not.
//
//	0 s      a stream entered by hand; SIGTERM, no preStop: grace 4 s
//	0.2 s    2 sandboxes preserved (limit 1): StreamsEnded, the holder leaves
//	0.2 s    the server step finds nothing open
func TestAStreamEnteredByItsHolderEndsWhenTheGateSaysStreamsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handled := make(chan struct{})
		f := newFixture(t, fixtureOpts{grace: 4 * time.Second, sandboxes: 2, latency: 100 * time.Millisecond, limit: 1,
			edit: func(c *Config) { c.Gate = &Gate{Exempt: []Class{Stream}} }, // NewServer's, for streams
			steps: []Step{step("server", 250*time.Millisecond, func(ctx context.Context) error {
				select { // as the server's shutdown waits for its connection
				case <-handled:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})}})
		g := f.d.Gate()
		leave, err := g.Enter(Stream)
		require.NoError(t, err)
		var endedAt time.Time
		go func() {
			defer close(handled)
			defer leave()
			<-g.StreamsEnded() // and the stream's own end: its client leaving
			endedAt = time.Now()
		}()

		rep := f.d.Shutdown(t.Context())
		p, s := rep.Phase(PhasePreserve), rep.Phase("server")
		assert.Equal(t, OK, s.Result, s.Error)
		assert.Zero(t, s.Duration, "the stream had ended")
		require.NoError(t, rep.Err())
		assert.Equal(t, p.End, endedAt, "as the preserve phase ended")
		assert.Zero(t, g.InFlight(Stream))
		_, err = g.Enter(Stream)
		assert.ErrorIs(t, err, ErrDraining, "an exempt Stream once streams ended")
	})
}

// Fault: a Gate that exempted a class that starts a sandbox (Resume, so
// that a user's resume is never refused) passed New, and admitted such an
// operation after the preserve phase's last listing: the sandbox it
// started ran until SIGKILL, in no entry of the Report, which said none
// lost (exit 0). New now refuses it, naming the class.
//
//	0 s    SIGTERM, no preStop: sb-0 preserved
//	later  the http step runs; a user's resume is admitted, "resumed" starts
//	end    the Report: 1 preserved, 0 lost; "resumed" runs
//
// docs/faults.md row 477.
func TestGateExemptingAClassThatStartsASandboxIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		node := fakesandbox.NewNode()
		node.AddN("sb", 1, 100*time.Millisecond)
		gate := &Gate{Exempt: []Class{Pause, Resume}}
		resume := step("http", time.Second, func(context.Context) error {
			leave, err := gate.Enter(Resume) // a user's resume reaches the server
			if err != nil {
				return nil // refused: its client goes to another node
			}
			defer leave()
			node.Add(&fakesandbox.Sandbox{Name: "resumed"})
			return nil
		})
		d, err := New(Config{Budget: b, Sandboxes: node, Gate: gate, Steps: []Step{resume}})
		if err == nil {
			rep := d.Shutdown(t.Context())
			running, _ := node.List(t.Context())
			t.Fatalf("New took the Gate: the Report says %d lost, err %v, with %d sandbox(es) still running", rep.Lost(), rep.Err(), len(running))
		}
		assert.ErrorContains(t, err, `drain: Config.Gate.Exempt holds "resume", a class that starts a sandbox`)
	})
}

// Fault: a Gate whose RetryAfter is negative (written to mean "send no
// Retry-After", or a sign slip) passed New, and the middleware sent
// clients its default of 5 s without a word. New now refuses it, naming
// the field and the value; zero still means 5 s.
func TestGateWithANegativeRetryAfterIsRefused(t *testing.T) {
	b, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	_, err = New(Config{Budget: b, Sandboxes: fakesandbox.NewNode(), Gate: &Gate{RetryAfter: -time.Second}})
	require.Error(t, err, "New took a Gate with RetryAfter -1s")
	assert.ErrorContains(t, err, "drain: Config.Gate.RetryAfter must not be negative (zero means 5s), got -1s")
}
