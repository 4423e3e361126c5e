package httpsource

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause request its context cut while the server had it (the
// drain's deadline, the Preserver's bound of the sandbox, Force) said only
// "httpsource: pause a: context canceled": not that the request was on the
// wire and the server never answered, nor which request. And it was not
// recorded as a pause that got no answer, as one its Config.PauseTimeout
// cut is: the server goes on with such a pause, and when it fails and the
// server removes the sandbox (AgentENV does), the 404 to a later pause
// (the final sweep's) read as a sandbox its user deleted, gone, lost in
// silence. On loopback: the server holds the pause until the client goes
// away, goes on with it, and removes the sandbox.
func TestPauseCutByItsContextGotNoAnswer(t *testing.T) {
	got, removed := make(chan struct{}), make(chan struct{})
	var gone atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			http.Error(w, `{"message":"sandbox a not found"}`, http.StatusNotFound)
			return
		}
		close(got)
		<-r.Context().Done() // the client went away; the server goes on, and the pause fails
		gone.Store(true)
		close(removed)
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	src, err := New(ts.URL, Config{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-got
		cancel()
	}()
	err = src.Sandbox("a").Preserve(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "no answer")
	assert.ErrorContains(t, err, ts.URL+"/sandboxes/a/pause", "the request is named")

	<-removed
	err = src.Sandbox("a").Preserve(t.Context())
	require.Error(t, err)
	assert.NotErrorIs(t, err, pause.ErrGone, "removed after a pause of ours that got no answer: lost, not gone")
	assert.True(t, isPermanent(err), "%v", err)
	assert.ErrorContains(t, err, "got no answer")
	assert.ErrorContains(t, err, "404")
}

// The same through the Preserver and AgentENV's double, as the supervisor
// runs them: the preserve phase's hard deadline cuts a pause the server
// goes on with, and it fails terminally (the sandbox removed); a later Run
// (the final sweep, over a listing that lags) gets 404. The phase's entry
// says the server never answered, and the later one counts the sandbox
// lost, not vanished.
func TestPauseCutAtTheDeadlineIsInTheReportAsNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: 2 * time.Second, FailTerminal: 1})
		require.NoError(t, err)
		sb, err := srv.Create(1024)
		require.NoError(t, err)
		src := inProcess(t, srv.Handler(), AgentENV())
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, time.Second), time.Time{})
		e := entry(t, rep, sb.SandboxID)
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Contains(t, e.Error, "no answer")

		time.Sleep(2 * time.Second) // the server's pause ends, failed: the sandbox removed
		sweep, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			return []pause.Sandbox{src.Sandbox(sb.SandboxID)}, nil
		}), pause.Config{})
		require.NoError(t, err)
		rep = sweep.Run(ctxWithDeadline(t, time.Minute), time.Time{})
		e = entry(t, rep, sb.SandboxID)
		assert.Equal(t, pause.Failed, e.Outcome, e.Error)
		assert.Contains(t, e.Error, "got no answer")
		assert.Equal(t, 1, rep.Lost())
	})
}

// A Preserve given a context that has already ended sends nothing, so it
// says so and is no pause that got no answer: a sandbox its user deletes
// afterwards is gone, not lost.
func TestPauseWhoseContextHadEndedSendsNothing(t *testing.T) {
	var pauses atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		pauses.Add(1)
		http.Error(w, `{"message":"sandbox a not found"}`, http.StatusNotFound)
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	src, err := New(ts.URL, Config{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = src.Sandbox("a").Preserve(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotContains(t, err.Error(), "no answer", "nothing was sent")
	assert.Zero(t, pauses.Load())

	err = src.Sandbox("a").Preserve(t.Context())
	assert.ErrorIs(t, err, pause.ErrGone, "deleted by its user: no pause of ours was out")
	assert.Equal(t, int64(1), pauses.Load())
}

// A pause sent again after the server answered the one before 500 (its
// snapshot failed; AgentENV resumes the VM and the Preserver retries) and
// cut by the hard deadline while the server had it said only "no answer
// before its context ended: ... context deadline exceeded": the Report's
// entry, the log line and the supervisor's account lost the 500 that made
// the Preserver send it again, as a listing's did before row 1710. The
// entry names both:
//
//	0 s      pause: 500 snapshot failed
//	~0.2 s   pause again (the Preserver's backoff): the server pauses, 10 s
//	3 s      the phase deadline
//	5 s      the hard deadline cuts it: TimedOut, "no answer" and the 500
func TestPauseCutAfterAFailedOneNamesThatFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: 10 * time.Second, FailFirst: 1})
		require.NoError(t, err)
		sb, err := srv.Create(1024)
		require.NoError(t, err)
		src := inProcess(t, srv.Handler(), AgentENV())
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		rep := p.Run(ctxWithDeadline(t, 3*time.Second), time.Now().Add(5*time.Second))

		e := entry(t, rep, sb.SandboxID)
		assert.Equal(t, pause.TimedOut, e.Outcome)
		assert.Equal(t, 2, e.Attempts)
		assert.Contains(t, e.Error, "no answer before its context ended", "the attempt the deadline cut")
		assert.Contains(t, e.Error, "500 Internal Server Error", "the answer that made the Preserver send it again")
		assert.Contains(t, e.Error, "snapshot failed (injected)")
		assert.Equal(t, 1, strings.Count(e.Error, "500 Internal Server Error"), "named once: pause adds no failure the error names already (row 1921)")
		time.Sleep(10 * time.Second) // the server's pause ends
	})
}
