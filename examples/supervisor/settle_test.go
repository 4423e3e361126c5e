//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/httpsource"
)

// Fault: a sandbox snapshotted or forked through the whole drain. AgentENV
// lists it paused (a snapshot and a fork show as paused), so no pass of the
// preserve phase listed it and the final sweep did not either: it had no
// entry in the Report, which said every sandbox preserved, and it ran again
// once its snapshot ended, until SIGKILL. The sweep now lists every sandbox
// not paused (state=paused filters on the exact state): the fork that ends
// within the sweep's time is paused then, the snapshot that never ends is
// lost, its 409 naming its state, in virtual time:
//
//	0 s     SIGTERM (grace 100 s): 2 of 4 sandboxes running, paused in 1 s
//	1 s     server step: the sweep lists the forking and the snapshotting
//	        ones; their pauses answer 409, retried
//	30 s    the fork ends: the sandbox runs, the sweep pauses it
//	48 s    the sweep's half of the step: the snapshot still runs, Failed
func TestSandboxesSnapshottedOrForkedThroughTheDrainAreInTheReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 4, fakeagentenv.Config{PauseBase: time.Second})
		endSnapshot, err := srv.Snapshot(ids[0]) // never ends
		require.NoError(t, err)
		defer endSnapshot()
		endFork, err := srv.Fork(ids[1])
		require.NoError(t, err)
		go func() { time.Sleep(30 * time.Second); endFork() }()

		rep := drainInProcess(t, srv, "100s")

		require.NotNil(t, rep.Preserve)
		assert.Len(t, rep.Preserve.Entries, 4, "every sandbox has its entry")
		assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, 1, rep.Lost())
		byID := entries(rep.Preserve)
		assert.Equal(t, pause.Preserved, byID[ids[1]].Outcome, "paused once its fork ended")
		assert.Equal(t, pause.Failed, byID[ids[0]].Outcome, "still snapshotting when the sweep's time was up")
		assert.Contains(t, byID[ids[0]].Error, "snapshotting")
		assert.Equal(t, fakeagentenv.Paused, srv.States()[ids[1]])
		require.NotNil(t, rep.Phase(StepServer))
		assert.Equal(t, drain.Failed, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
	})
}

// Fault: force mode (a second SIGTERM) during the drain. The final sweep
// did nothing then (no new pause is sent in force mode): a sandbox being
// snapshotted through the drain, which no listing of the preserve phase
// shows, had no entry, and the Report said 2 of 2 preserved, 0 lost. The
// sweep now still lists, and accounts for what it would have paused: not
// started, lost, in virtual time:
//
//	0 s      SIGTERM (grace 100 s): 2 of 3 running, pauses of 1 s
//	0.5 s    second SIGTERM: the 2 pauses in flight finish at 1 s
//	1 s      server step: the sweep lists the snapshotting one, not_started
func TestForcedSweepStillAccountsForWhatItDoesNotPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 3, fakeagentenv.Config{PauseBase: time.Second})
		endSnapshot, err := srv.Snapshot(ids[0]) // never ends
		require.NoError(t, err)
		defer endSnapshot()

		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, hooks{forceAfter: 500 * time.Millisecond}, "-grace", "100s")

		assert.True(t, rep.Forced)
		require.NotNil(t, rep.Preserve)
		assert.Len(t, rep.Preserve.Entries, 3, "every sandbox has its entry")
		assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
		assert.Equal(t, 1, rep.Lost())
		e := entries(rep.Preserve)[ids[0]]
		assert.Equal(t, pause.NotStarted, e.Outcome)
		assert.Contains(t, e.Error, "force mode")
		assert.Equal(t, int64(1<<30), e.Size, "its size, as the preserve phase's entries have theirs")
		assert.Equal(t, time.Second, e.End.Sub(rep.Start), "when the sweep listed it")
		assert.True(t, e.Start.IsZero(), "never started: no Start, as pause's not_started entries")
		assert.Equal(t, 2, srv.Stats().PauseRequests, "the 2 pauses, and none sent in force mode")
	})
}

// Fault: the preStop wait and the drain plan counted the running
// sandboxes only. AgentENV lists a sandbox being snapshotted or forked as
// paused, and it runs again once that ends: the preserve phase's reserve
// left it out, so the wait ended as late as if it needed no pause, and the
// ones whose snapshot ended just before SIGTERM were paused in what was
// left of the preserve phase and the final sweep, or lost. With -api
// agentenv the wait counts every sandbox not paused (as the final sweep
// lists them), in virtual time, one pause at a time (-concurrency 1) of
// 1 s (the estimate):
//
//	0 s       preStop (grace 60 s: margin 5 s, server step 6 s, preserve
//	          deadline 49 s): 2 sandboxes running, 8 being snapshotted
//	before:   the wait counted 2, a 2 s reserve: it ended at 46.7 s, the 8
//	          ran again at 46.8 s, SIGTERM at 47 s: 5 paused, 5 lost
//	now:      it counts 10, a 10 s reserve: it ends at 38.7 s, the 8 run
//	          again at 38.8 s, SIGTERM at 39 s: all 10 paused by 49 s
func TestPreStopWaitCountsSandboxesSnapshottedOrForked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 10, fakeagentenv.Config{PauseBase: time.Second})
		var ends []func()
		for _, id := range ids[2:] {
			end, err := srv.Snapshot(id)
			require.NoError(t, err)
			ends = append(ends, end)
		}
		t0 := time.Now()
		var answered time.Time
		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, hooks{preStop: func() {
			answered = time.Now()
			for _, end := range ends {
				time.AfterFunc(100*time.Millisecond, end) // just before SIGTERM
			}
		}}, "-grace", "60s", "-concurrency", "1")

		require.NotNil(t, rep.PreStop)
		assert.Equal(t, 10, rep.PreStop.Running, "the wait counted the ones being snapshotted")
		assert.Equal(t, 38700*time.Millisecond, answered.Sub(t0), "the wait ended with 10 pauses of 1 s reserved")
		require.NotNil(t, rep.Preserve)
		assert.Equal(t, 10, rep.Preserve.Counts[pause.Preserved], ids)
		assert.Zero(t, rep.Lost())
	})
}

// agentenvDouble returns the AgentENV double (API key "k") with n running
// sandboxes of 1 GiB, and their IDs in creation order.
func agentenvDouble(t *testing.T, n int, cfg fakeagentenv.Config) (*fakeagentenv.Server, []string) {
	t.Helper()
	cfg.APIKey = "k"
	srv, err := fakeagentenv.New(cfg)
	require.NoError(t, err)
	ids := make([]string, n)
	for i := range ids {
		sb, err := srv.Create(1024)
		require.NoError(t, err)
		ids[i] = sb.SandboxID
	}
	return srv, ids
}

// drainInProcess runs the supervisor's drain (-api agentenv, -grace grace,
// no daemon) in front of srv, in-process for synctest: SIGTERM now, the
// preserve phase, then the server step up to the server's SIGTERM, which
// it does not send: no server process runs.
func drainInProcess(t *testing.T, srv *fakeagentenv.Server, grace string) *drain.Report {
	t.Helper()
	return drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, hooks{}, "-grace", grace)
}

// hooks are what drainBeforeSIGTERM does besides the drain.
type hooks struct {
	beforeStep func()        // called as the server step begins, before the final sweep
	atSIGTERM  func()        // called where the server step would send the SIGTERM
	forceAfter time.Duration // a second SIGTERM this long after the first; 0: none
	// preStop, when set, makes the kubelet's preStop call first (T0), and
	// is called when it answers; SIGTERM follows 300 ms later.
	preStop func()
	made    func(*supervisor) // called once the supervisor and its drainer are made
}

// drainBeforeSIGTERM is drainInProcess for the server client talks to (at
// -server-url, among args), with h.
func drainBeforeSIGTERM(t *testing.T, client *http.Client, h hooks, args ...string) *drain.Report {
	t.Helper()
	cfg, err := parseArgs(append(append([]string{"-api", "agentenv"}, args...), "--", "server"), io.Discard)
	require.NoError(t, err)
	cfg.apiKey, cfg.client = "k", client
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	sup.server = &child{name: StepServer, done: make(chan struct{})} // never exits
	step := serverStep{drain.NewStep(sup.steps[0].Phase(), func(ctx context.Context) (any, error) {
		if h.beforeStep != nil {
			h.beforeStep()
		}
		swept, err := sup.beforeSIGTERM(ctx)
		if h.atSIGTERM != nil {
			h.atSIGTERM()
		}
		if swept == nil {
			return nil, err
		}
		return swept, err
	}), &sup.sweepWin} // the server step's Tighten
	d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.counted, Preserver: sup.preserver, Steps: []drain.Step{step}})
	require.NoError(t, err)
	sup.drainer = d
	if h.made != nil {
		h.made(sup)
	}
	if h.preStop != nil {
		d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/drain", nil))
		h.preStop()
		time.Sleep(300 * time.Millisecond) // the kubelet's lag to SIGTERM
	}
	sup.budget.OnSIGTERM(time.Now())
	if h.forceAfter > 0 {
		forced := time.AfterFunc(h.forceAfter, d.Force)
		defer forced.Stop()
	}
	return d.Shutdown(context.Background())
}

// entries returns the Report's entries by ID.
func entries(rep *pause.Report) map[string]pause.Entry {
	out := make(map[string]pause.Entry, len(rep.Entries))
	for _, e := range rep.Entries {
		out[e.ID] = e
	}
	return out
}

// Fault: a pause the supervisor gave up on that the server finished. The
// final sweep waits for its pauses until three quarters of the server
// step, then sends the SIGTERM; AgentENV goes on with a pause whose client
// left (its own shutdown waits for a sandbox being paused), so the sandbox
// ended paused, and durable, while the Report counted it lost (timed out)
// and the exit status said so. The sweep now keeps listing the ones it
// gave up on while AgentENV shows them being paused, until seven eighths
// of the step: one listed paused then counts preserved, its entry's error
// saying it finished late, in virtual time:
//
//	0 s      SIGTERM (grace 100 s): 2 sandboxes of 1 GiB paused in 2 s; a
//	         third, of 74 GiB, is being snapshotted until 3 s
//	2 s      server step (until 95 s): the sweep retries the third's 409
//	3.x s    its snapshot over, its pause starts: 75 s
//	72.5 s   three quarters of the step: the sweep gives up on it
//	78 s     the server finishes it: listed paused, counted preserved
//	83.75 s  seven eighths: the latest the sweep would have waited
func TestPauseTheSweepGaveUpOnThatTheServerFinishedIsPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, big := sweptLate(t)

		rep := drainInProcess(t, srv, "100s")

		require.NotNil(t, rep.Preserve)
		e := entries(rep.Preserve)[big]
		assert.Equal(t, pause.Preserved, e.Outcome, "the server finished its pause: %s", e.Error)
		assert.Contains(t, e.Error, "finished late")
		assert.Zero(t, rep.Lost())
		assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved], srv.States())
		assert.Equal(t, fakeagentenv.Paused, srv.States()[big])
		require.NotNil(t, rep.Phase(StepServer))
		assert.Equal(t, drain.OK, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
	})
}

// sweptLate returns the AgentENV double with 2 running sandboxes of 1 GiB, paused in 2 s,
// and a third of 74 GiB (its pause 75 s) being snapshotted until 3 s, which no listing of
// the preserve phase finds and the final sweep does, in virtual time; and the third's ID.
func sweptLate(t *testing.T) (*fakeagentenv.Server, string) {
	t.Helper()
	srv, _ := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second, PausePerGiB: time.Second})
	big, err := srv.Create(74 * 1024)
	require.NoError(t, err)
	endSnapshot, err := srv.Snapshot(big.SandboxID)
	require.NoError(t, err)
	go func() { time.Sleep(3 * time.Second); endSnapshot() }()
	return srv, big.SandboxID
}

// Fault: the supervisor's API client kept its connections to the server
// open (idle, kept alive for a next request) when the server got its
// SIGTERM. Nothing is asked of the server after it (AgentENV accepts no
// connection then), and a server whose graceful shutdown waits for its open
// connections (hyper's waits for one that never sent a request, which a Go
// transport can keep after a dial whose request was given up; axum's has
// been seen held by an idle keep-alive) would wait for ours until the
// step's SIGKILL. The AgentENV double, net/http's Shutdown, closes idle
// connections at once, as AgentENV's hyper does one between requests: the
// test watches the client's own connections after the SIGTERM instead.
// One may still be open at the SIGTERM itself: net/http's transport gives a
// connection back, or closes it, on a goroutine of its own after its
// response was read, so the last one closes microseconds after the SIGTERM
// (1 run in 25 under -race); kept alive, one would stay open for good (the
// test's transport has no idle timeout). The test asserts the latter.
func TestNoConnectionOfTheSupervisorIsOpenWhenTheServerGetsItsSIGTERM(t *testing.T) {
	srv, _ := agentenvDouble(t, 8, fakeagentenv.Config{PauseBase: 10 * time.Millisecond})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	var open, opened atomic.Int64
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		open.Add(1)
		opened.Add(1)
		return &countedConn{Conn: c, open: &open}, nil
	}}
	defer tr.CloseIdleConnections()
	var atSIGTERM, openedAtSIGTERM int64
	var closed bool
	rep := drainBeforeSIGTERM(t, &http.Client{Transport: tr}, hooks{atSIGTERM: func() {
		atSIGTERM, openedAtSIGTERM = open.Load(), opened.Load()
		// Nothing asks the server anything now: every connection still
		// open must be one the transport is closing, not one kept alive.
		closed = assert.Eventually(t, func() bool { return open.Load() == 0 }, 5*time.Second, time.Millisecond)
	}}, "-grace", "10s", "-concurrency", "4", "-server-url", ts.URL)

	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved])
	assert.Positive(t, openedAtSIGTERM)
	assert.True(t, closed, "connections of the supervisor's kept open after the server got its SIGTERM: %d open then, %d now, of %d opened",
		atSIGTERM, open.Load(), openedAtSIGTERM)
}

// countedConn is a connection that counts itself out of open when closed.
type countedConn struct {
	net.Conn
	open *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}

// Fault: the wait for the pauses the final sweep gave up on (finishedLate)
// ended at the first listing that failed, a 503 or a connection reset from
// a server that was still up and finishing them, and said nothing: a
// sandbox the server paused a moment later stayed timed out, counted lost
// in the Report and the exit status, and no log line named the listing's
// error. A transient failure is now listed again at the next interval,
// until the wait's end; a permanent one (a refused key) ends the wait,
// and a failure that ended it is logged. On loopback, against a server whose
// state=paused listing answers 503 once, then 401 once the key is refused.
func TestSweepWaitForAPauseItGaveUpOnOutlastsAFailedListing(t *testing.T) {
	var pausedLists atomic.Int64
	var refuse atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case refuse.Load():
			http.Error(w, `{"message":"unauthorized"}`, http.StatusUnauthorized)
		case r.URL.Query().Get("state") == "paused" && pausedLists.Add(1) == 1:
			http.Error(w, `{"message":"busy"}`, http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[{"sandboxID":"sb-late","state":"paused","memoryMB":1024}]`)
		}
	}))
	defer ts.Close()
	var logs bytes.Buffer
	sup := &supervisor{log: slog.New(slog.NewTextHandler(&logs, nil))}
	src, err := httpsource.New(ts.URL, httpsource.AgentENV())
	require.NoError(t, err)
	np, err := newNotPaused(src, ts.URL, httpsource.AgentENV())
	require.NoError(t, err)
	sup.sweepList = np
	gaveUp := func() *pause.Report {
		return &pause.Report{Entries: []pause.Entry{{ID: "sb-late", Outcome: pause.TimedOut, Error: "context deadline exceeded"}},
			Counts: map[pause.Outcome]int{pause.TimedOut: 1}}
	}

	rep := gaveUp()
	sup.finishedLate(t.Context(), rep, time.Now().Add(10*time.Second))
	e := rep.Entries[0]
	assert.Equal(t, pause.Preserved, e.Outcome, "listed paused after the 503: %s", e.Error)
	assert.Contains(t, e.Error, "finished late")
	assert.EqualValues(t, 2, pausedLists.Load(), "the 503, then the listing that showed it paused")
	assert.NotContains(t, logs.String(), "level=ERROR", "a listing that failed, then answered, lost nothing")

	refuse.Store(true)
	logs.Reset()
	rep = gaveUp()
	sup.finishedLate(t.Context(), rep, time.Now().Add(10*time.Second))
	assert.Equal(t, pause.TimedOut, rep.Entries[0].Outcome)
	assert.Contains(t, logs.String(), "401", "the refusal that ended the wait")
}

// Fault: a pause someone else began, joined by the final sweep, failed
// terminally. AgentENV removes a sandbox whose pause fails terminally and
// answers a request that joined that pause 404, the answer of a sandbox
// deleted by its user. The sweep lists the sandboxes AgentENV shows paused
// that are not (being paused, snapshotted or forked) and pauses them; the
// 404 made this one Vanished, and the Report said none lost though the
// sandbox and its state were gone. One listed in such a transition and
// answered gone is now lost, in virtual time:
//
//	0 s     a user pauses the 30 GiB sandbox (31 s; it will fail)
//	0 s     SIGTERM (grace 100 s): the 1 GiB one paused in 2 s
//	2 s     server step: the sweep lists the one being paused, whose
//	        pause joins the user's
//	31 s    that pause fails terminally: removed; the user gets 500, the
//	        sweep 404
func TestSandboxRemovedByAPauseTheSweepJoinedIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 1, fakeagentenv.Config{PauseBase: time.Second, PausePerGiB: time.Second, FailTerminal: 2})
		big, err := srv.Create(30 * 1024)
		require.NoError(t, err)
		client := &http.Client{Transport: handlerTransport{srv.Handler()}}
		userGot := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://agentenv/sandboxes/"+big.SandboxID+"/pause", nil)
			req.Header.Set("X-API-Key", "k")
			resp, err := client.Do(req)
			if err != nil {
				userGot <- 0
				return
			}
			resp.Body.Close()
			userGot <- resp.StatusCode
		}()
		synctest.Wait()
		require.Equal(t, fakeagentenv.Pausing, srv.States()[big.SandboxID])

		rep := drainBeforeSIGTERM(t, client, hooks{}, "-grace", "100s")

		assert.Equal(t, http.StatusInternalServerError, <-userGot, "the user's pause failed terminally")
		assert.NotContains(t, srv.States(), big.SandboxID, "removed by the server")
		require.NotNil(t, rep.Preserve)
		byID := entries(rep.Preserve)
		assert.Equal(t, pause.Preserved, byID[ids[0]].Outcome)
		assert.Equal(t, pause.Failed, byID[big.SandboxID].Outcome, byID[big.SandboxID].Error)
		assert.Contains(t, byID[big.SandboxID].Error, "404")
		assert.Equal(t, 1, rep.Lost())
	})
}

// Fault: the final sweep's wait for the pauses it gave up on (settle) listed again
// every 250 ms after a listing AgentENV answered 503 with a Retry-After, where the
// server had named when to ask again: requests to a server that said it was busy,
// while it was finishing those very pauses. It now waits for the time the answer
// names (a pause.Lister's RetryAt), the 250 ms at the least. In virtual time, the
// listing of the paused ones answered 503 "Retry-After: 2" for its first 2 s:
//
//	before: 9 listings of the paused ones (8 refused), the pause finished late credited
//	now:    2 (the 503, then the one at 2 s), credited the same
func TestSweepWaitForAPauseItGaveUpOnKeepsToRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var pausedLists int
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("state") == "paused" {
				pausedLists++
				if time.Since(start) < 2*time.Second {
					w.Header().Set("Retry-After", "2")
					http.Error(w, `{"code":503,"message":"busy"}`, http.StatusServiceUnavailable)
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[{"sandboxID":"sb-late","state":"paused","memoryMB":1024}]`)
		})
		cfg := httpsource.AgentENV()
		cfg.Client = &http.Client{Transport: handlerTransport{h}}
		src, err := httpsource.New("http://agentenv.test", cfg)
		require.NoError(t, err)
		np, err := newNotPaused(src, "http://agentenv.test", cfg)
		require.NoError(t, err)
		sup := &supervisor{log: slog.New(slog.NewTextHandler(io.Discard, nil)), sweepList: np}
		rep := &pause.Report{Entries: []pause.Entry{{ID: "sb-late", Outcome: pause.TimedOut, Error: "context deadline exceeded"}},
			Counts: map[pause.Outcome]int{pause.TimedOut: 1}}
		sup.finishedLate(t.Context(), rep, start.Add(10*time.Second))
		assert.Equal(t, pause.Preserved, rep.Entries[0].Outcome, rep.Entries[0].Error)
		assert.Equal(t, 2, pausedLists, "the 503, then the listing at the time it named")
		assert.Equal(t, 2*time.Second, time.Since(start))
	})
}

// Fault: a sandbox the preserve phase could not pause (AgentENV answering
// its pauses 500 to the end) that the final sweep did not start (force
// mode sends no pause; or its time ran out first) had its entry replaced
// by the sweep's: "force mode: no new pause is sent", and the 500 that
// kept it running was gone from the Report, which blamed the second
// SIGTERM alone. The sweep's not_started entry of such a sandbox now
// keeps why the preserve phase could not pause it, in virtual time:
//
//	0 s      SIGTERM (grace 100 s): 2 running; one's pauses answered 500,
//	         retried; the other paused in 1 s
//	5 s      second SIGTERM: no retry starts; the 500 is its entry's error
//	5 s+     server step: the forced sweep lists it running, not_started
func TestForcedSweepKeepsWhyThePreservePhaseCouldNotPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second})
		failing, api := "/sandboxes/"+ids[0]+"/pause", srv.Handler()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == failing {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"code":500,"message":"sandbox operation Pause failed: persistence unavailable"}`)
				return
			}
			api.ServeHTTP(w, r)
		})

		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{h}}, hooks{forceAfter: 5 * time.Second}, "-grace", "100s")

		assert.True(t, rep.Forced)
		require.NotNil(t, rep.Preserve)
		e := entries(rep.Preserve)[ids[0]]
		assert.Equal(t, pause.NotStarted, e.Outcome, e.Error)
		assert.Contains(t, e.Error, "force mode", "why the sweep sent none")
		assert.Contains(t, e.Error, "500 Internal Server Error", "why it still ran")
		assert.Contains(t, e.Error, "persistence unavailable")
		assert.Equal(t, pause.Preserved, entries(rep.Preserve)[ids[1]].Outcome)
	})
}
