package httpsource

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// The resume race, on AgentENV's API over loopback. The supervisor cannot
// close AgentENV's admissions: until AgentENV's own shutdown, a user's
// resume of a sandbox the Run has paused is admitted. The next pass lists
// it running again and pauses it again, so it ends paused and its entry
// says it was listed again. Before, a sandbox was preserved at most once
// per Run: the Report said preserved, and the sandbox was running at the
// end, lost at SIGKILL (docs/faults.md entry 93).
//
//	pass 1  list: 3 running; pause all three (204)
//	        a user resumes i0000002: POST .../resume, 204
//	pass 2  list: i0000002 running again; pause it again (204)
//	pass 3  after the backoff, list: nothing running; the Run ends
func TestAgentENVSandboxResumedDuringTheRunIsPausedAgain(t *testing.T) {
	srv, url, _ := agentenv(t, 3, fakeagentenv.Config{APIKey: "k", PauseBase: time.Millisecond})
	src, err := New(url, agentENVWithKey("k"))
	require.NoError(t, err)
	const resumed = "i0000002"
	lists := 0
	p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		if lists++; lists == 2 {
			resume(t, url, "k", resumed) // the user's, between the passes
		}
		return src.List(ctx)
	}), pause.Config{Limit: 4, BackOff: constantBackOff(10 * time.Millisecond)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep := p.Run(ctx, time.Time{})

	for id, st := range srv.States() {
		assert.Equal(t, fakeagentenv.Paused, st, "%s: paused at the end", id)
	}
	assert.Equal(t, 3, rep.Counts[pause.Preserved])
	assert.NoError(t, rep.Err())
	assert.Equal(t, 3, rep.Passes)
	e := entry(t, rep, resumed)
	assert.Equal(t, 1, e.Relisted, "the Report says it was listed again")
	assert.Equal(t, 2, e.Attempts)
	assert.Equal(t, 4, srv.Stats().PauseRequests, "three pauses, and the resumed one's again")
}

// A listing that lags the pauses (a sandbox just paused still shown
// running, as an eventually consistent list may) costs one instant pause
// per sandbox, not a tight loop: AgentENV answers 204 at once to the pause
// of a paused sandbox (docs/faults.md entry 76), and the Run waits the
// backoff before it lists again. Each entry says it was listed again.
//
//	0 s     pass 1: 4 sandboxes, 1 s pauses, 4 at a time   1 s  all paused
//	1 s     pass 2: the lagging listing shows all 4 running: 4 pauses, 204 at once
//	1 s     only sandboxes listed again: wait the backoff (1 s)
//	2 s     pass 3: the listing has caught up: nothing; the Run ends
func TestAgentENVLaggingListingCostsOneInstantPauseNotALoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: time.Second})
		require.NoError(t, err)
		for range 4 {
			_, err := srv.Create(1024)
			require.NoError(t, err)
		}
		h := &laggingList{h: srv.Handler(), lagOn: 2}
		src := inProcess(t, h, AgentENV())
		p, err := pause.New(src, pause.Config{Limit: 4, BackOff: constantBackOff(time.Second)})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Time{})

		assert.Equal(t, 2*time.Second, time.Since(start))
		assert.Equal(t, 3, rep.Passes)
		assert.Equal(t, 4, rep.Counts[pause.Preserved])
		assert.NoError(t, rep.Err())
		for _, e := range rep.Entries {
			assert.Equal(t, 1, e.Relisted, e.ID)
			assert.Equal(t, 2, e.Attempts, e.ID)
			assert.Equal(t, time.Duration(0), e.Duration, "%s: its last pause, answered at once", e.ID)
		}
		assert.Equal(t, 8, srv.Stats().PauseRequests)
		assert.Equal(t, time.Second, p.Estimator().Estimate(), "the instant pauses are not measured as pauses")
	})
}

// laggingList serves h, except that its lagOn-th list request gets the
// answer of the one before: a listing that has not caught up with the
// pauses in between.
type laggingList struct {
	h     http.Handler
	lagOn int

	mu    sync.Mutex
	lists int
	last  []byte
}

func (l *laggingList) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/v2/sandboxes" {
		l.h.ServeHTTP(w, r)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lists++; l.lists == l.lagOn {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(l.last)
		return
	}
	rec := &recorder{header: http.Header{}}
	l.h.ServeHTTP(rec, r)
	l.last = rec.body
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body)
}

// recorder keeps an answer to pass it on.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	r.body = append(r.body, b...)
	return len(b), nil
}

// resume resumes a paused sandbox as its user would, through the API.
func resume(t *testing.T, url, key, id string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/sandboxes/"+id+"/resume", nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", key)
	req.Close = true // no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "the resume is admitted: AgentENV's own shutdown has not begun")
}

func constantBackOff(d time.Duration) func() backoff.BackOff {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}
