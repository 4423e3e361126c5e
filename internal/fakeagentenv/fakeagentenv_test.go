package fakeagentenv_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper:agentenv" {
		os.Exit(fakeagentenv.Main(os.Args[2:], os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

func do(t *testing.T, method, url, key string) (*http.Response, []fakeagentenv.Sandbox) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out []fakeagentenv.Sandbox
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	}
	return resp, out
}

func TestPagesFollowTheNextTokenAndCoverEverySandboxOnce(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k", PageSize: 7})
	require.NoError(t, err)
	for i := range 20 {
		_, err := srv.Create(512 * (1 + i%3))
		require.NoError(t, err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	seen := map[string]int{}
	url, pages := ts.URL+"/v2/sandboxes?state=running", 0
	for {
		resp, page := do(t, http.MethodGet, url, "k")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		pages++
		for _, sb := range page {
			seen[sb.SandboxID]++
			assert.Equal(t, fakeagentenv.Running, sb.State)
			assert.Positive(t, sb.MemoryMB)
		}
		tok := resp.Header.Get(fakeagentenv.HeaderNextToken)
		if tok == "" {
			break
		}
		url = ts.URL + "/v2/sandboxes?state=running&nextToken=" + tok
	}
	assert.Equal(t, 3, pages, "20 sandboxes in pages of 7")
	assert.Len(t, seen, 20)
	for id, n := range seen {
		assert.Equal(t, 1, n, id)
	}
}

func TestWithoutTheKeyEveryAPIRequestIs401(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k"})
	require.NoError(t, err)
	sb, err := srv.Create(512)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, r := range [][2]string{{"GET", "/v2/sandboxes"}, {"GET", "/sandboxes"}, {"POST", "/sandboxes/" + sb.SandboxID + "/pause"}} {
		resp, _ := do(t, r[0], ts.URL+r[1], "wrong")
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, r[1])
	}
	resp, _ := do(t, "GET", ts.URL+"/health", "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, fakeagentenv.Running, srv.States()[sb.SandboxID], "nothing paused without the key")
}

// A rotated key: from SetAPIKey on, the new key is taken and the old one
// refused; an empty key takes every request.
func TestSetAPIKeyRotatesTheKeyTaken(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{APIKey: "k1"})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	status := func(key string) int {
		resp, _ := do(t, "GET", ts.URL+"/v2/sandboxes", key)
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, status("k1"))
	srv.SetAPIKey("k2")
	assert.Equal(t, http.StatusUnauthorized, status("k1"), "the old key")
	assert.Equal(t, http.StatusOK, status("k2"), "the new key")
	srv.SetAPIKey("")
	assert.Equal(t, http.StatusOK, status(""), "no key needed")
}

// As AgentENV's pause_sandbox: a second pause joins the one in progress and
// answers its outcome; a paused sandbox answers 204 at once; a snapshotting
// one 409; an unknown one 404. Neither a pausing nor a snapshotting sandbox
// is listed under state=running; unfiltered, both show as paused.
func TestPauseJoinsAPauseInProgressAndIsIdempotent(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: time.Second, StateDir: t.TempDir()})
	require.NoError(t, err)
	sb, err := srv.Create(1024)
	require.NoError(t, err)
	other, err := srv.Create(512)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	url := ts.URL + "/sandboxes/" + sb.SandboxID + "/pause"

	var wg sync.WaitGroup
	first := make(chan int, 1)
	wg.Go(func() { resp, _ := do(t, http.MethodPost, url, ""); first <- resp.StatusCode })
	require.Eventually(t, func() bool { return srv.States()[sb.SandboxID] == fakeagentenv.Pausing }, 5*time.Second, time.Millisecond)
	_, running := do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	require.Len(t, running, 1, "a pausing sandbox is not listed running")
	assert.Equal(t, other.SandboxID, running[0].SandboxID)
	_, all := do(t, http.MethodGet, ts.URL+"/v2/sandboxes", "")
	shown := map[string]string{}
	for _, l := range all {
		shown[l.SandboxID] = l.State
	}
	assert.Equal(t, map[string]string{sb.SandboxID: fakeagentenv.Paused, other.SandboxID: fakeagentenv.Running}, shown,
		"unfiltered, a pausing sandbox shows as paused")
	resp, _ := do(t, http.MethodPost, url, "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "joined the pause in progress, answered its outcome")
	assert.Equal(t, fakeagentenv.Paused, srv.States()[sb.SandboxID])
	wg.Wait()
	assert.Equal(t, http.StatusNoContent, <-first)
	resp, _ = do(t, http.MethodPost, url, "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "already paused")

	done, err := srv.Snapshot(other.SandboxID)
	require.NoError(t, err)
	resp, _ = do(t, http.MethodPost, ts.URL+"/sandboxes/"+other.SandboxID+"/pause", "")
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "snapshotting")
	_, running = do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	assert.Empty(t, running, "a snapshotting sandbox is not listed running")
	done()
	assert.Equal(t, fakeagentenv.Running, srv.States()[other.SandboxID], "running again after the snapshot")
	done, err = srv.Fork(other.SandboxID)
	require.NoError(t, err)
	resp, _ = do(t, http.MethodPost, ts.URL+"/sandboxes/"+other.SandboxID+"/pause", "")
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "forking")
	_, all = do(t, http.MethodGet, ts.URL+"/v2/sandboxes", "")
	assert.Equal(t, fakeagentenv.Paused, all[0].State, "a forking sandbox shows as paused")
	_, paused := do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=paused", "")
	require.Len(t, paused, 1, "state=paused lists the paused one alone, not the one forking")
	assert.Equal(t, sb.SandboxID, paused[0].SandboxID)
	done()
	assert.Equal(t, fakeagentenv.Running, srv.States()[other.SandboxID], "running again after the fork")

	resp, _ = do(t, http.MethodPost, ts.URL+"/sandboxes/nope/pause", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, 2, srv.Stats().Conflicts)
}

// A sandbox being deleted is killing, as in AgentENV's delete_sandbox:
// listed running without a filter, not under state=running, and its
// pause answered 404, as AgentENV's pause_sandbox answers one being
// killed; gone once its deletion is done.
func TestASandboxBeingDeletedIsListedRunningAndItsPauseIs404(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{})
	require.NoError(t, err)
	sb, err := srv.Create(1024)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	done, err := srv.BeginDelete(sb.SandboxID)
	require.NoError(t, err)
	_, all := do(t, http.MethodGet, ts.URL+"/v2/sandboxes", "")
	require.Len(t, all, 1)
	assert.Equal(t, fakeagentenv.Running, all[0].State, "unfiltered, a sandbox being killed shows as running")
	_, running := do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	assert.Empty(t, running, "not under state=running")
	resp, _ := do(t, http.MethodPost, ts.URL+"/sandboxes/"+sb.SandboxID+"/pause", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, fakeagentenv.Killing, srv.States()[sb.SandboxID])

	done()
	_, all = do(t, http.MethodGet, ts.URL+"/v2/sandboxes", "")
	assert.Empty(t, all, "gone once deleted")
}

func TestOnlyPausedSandboxesSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := fakeagentenv.New(fakeagentenv.Config{StateDir: dir})
	require.NoError(t, err)
	a, _ := srv.Create(512)
	_, _ = srv.Create(512)
	ts := httptest.NewServer(srv.Handler())
	resp, _ := do(t, http.MethodPost, ts.URL+"/sandboxes/"+a.SandboxID+"/pause", "")
	ts.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	again, err := fakeagentenv.New(fakeagentenv.Config{StateDir: dir})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{a.SandboxID: fakeagentenv.Paused}, again.States())
}

func TestWithoutV2TheDeprecatedListStillAnswers(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{NoV2: true})
	require.NoError(t, err)
	_, _ = srv.Create(2048)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, _ := do(t, http.MethodGet, ts.URL+"/v2/sandboxes", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, list := do(t, http.MethodGet, ts.URL+"/sandboxes", "")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, list, 1)
	assert.Equal(t, 2048, list[0].MemoryMB)
}

func TestShutdownRefusesCreatesAndPausesTheRestOneAtATime(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: time.Millisecond})
	require.NoError(t, err)
	for range 5 {
		_, _ = srv.Create(512)
	}
	assert.Equal(t, 5, srv.Shutdown())
	assert.Equal(t, 1, srv.Stats().MaxInPause)
	_, err = srv.Create(512)
	assert.Error(t, err)
}

// A user's resume of a paused sandbox is admitted until the server's own
// shutdown, then answered 503, as AgentENV gates it; with
// ResumeWhenNoneRunning the users resume theirs right after the first
// listing that finds none running, which still answers none running.
func TestResumeIsAdmittedUntilShutdownAndUsersResumeAfterTheLastListing(t *testing.T) {
	srv, err := fakeagentenv.New(fakeagentenv.Config{ResumeWhenNoneRunning: 2})
	require.NoError(t, err)
	for range 3 {
		_, _ = srv.Create(512)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	_, list := do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	require.Len(t, list, 3, "running: no resume yet")
	for _, sb := range list {
		resp, _ := do(t, http.MethodPost, ts.URL+"/sandboxes/"+sb.SandboxID+"/pause", "")
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	_, list = do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	assert.Empty(t, list, "the listing answers what it found")
	_, list = do(t, http.MethodGet, ts.URL+"/v2/sandboxes?state=running", "")
	require.Len(t, list, 2, "then its users resumed two, newest first")
	assert.Equal(t, []string{"i0000003", "i0000002"}, []string{list[0].SandboxID, list[1].SandboxID})

	resp, _ := do(t, http.MethodPost, ts.URL+"/sandboxes/i0000003/resume", "")
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "running, not paused")
	resp, _ = do(t, http.MethodPost, ts.URL+"/sandboxes/i0000001/resume", "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "admitted before the server's shutdown")
	assert.Equal(t, 3, srv.Shutdown(), "the server's own shutdown pauses the three running")
	resp, _ = do(t, http.MethodPost, ts.URL+"/sandboxes/i0000001/resume", "")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "refused once its shutdown began")
}

// AgentENV's server runs its cleanup (the orchestrator's shutdown, then the
// daemon's) as soon as SIGTERM arrives, beside axum's graceful shutdown of
// its connections (src/bin/server.rs), and hyper closes a connection that
// never sent a request at once. The double ran net/http's Shutdown first and
// its cleanup only after: a connection a client had dialed and not used (Go's
// Transport dials spares) held the cleanup back 5 s, so a supervisor whose
// server step had less left SIGKILLed the server mid-way (exit 137, seen in
// TestSupervisorReadsItsPodsDeletionAndPostsEvents). With such a connection
// open, the cleanup now finishes before the connection is closed.
func TestSIGTERMRunsTheCleanupAtOnceWhateverConnectionsAreOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "helper:agentenv", "-listen", addr, "-sandboxes", "2", "-pause-base", "1ms", "-pause-per-gib", "0s")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(want string) string {
		for l := range lines {
			if strings.Contains(l, want) {
				return l
			}
		}
		t.Fatalf("the server exited before %q", want)
		return ""
	}
	next("serving on")

	spare, err := net.Dial("tcp", addr) // dialed, no request sent
	require.NoError(t, err)
	defer spare.Close()
	resp, err := http.Get("http://" + addr + "/health") // the server has accepted the spare by now
	require.NoError(t, err)
	resp.Body.Close()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))

	// The server's own log, in order: the cleanup ran while the spare was
	// still open, which was closed only after it.
	assert.Contains(t, next("shutdown paused"), "shutdown paused 2 sandboxes")
	assert.Contains(t, next("connection(s) that never sent a request"), "closed 1 connection(s)")
	_, err = io.Copy(io.Discard, spare)
	assert.NoError(t, err, "closed by the server")
	require.NoError(t, cmd.Wait())
}

// AgentENV's shutdown waits 60 s for a sandbox in a transitional state,
// in each of its three passes over the sandboxes not paused
// (run_shutdown_cleanup), then goes on: the double waited for ever, so a
// snapshot that never ended held its shutdown (and the supervisor's server
// step) until SIGKILL. In virtual time.
func TestShutdownWaitsForATransitionOnlyAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: time.Millisecond})
		require.NoError(t, err)
		stuck, err := srv.Create(512)
		require.NoError(t, err)
		other, err := srv.Create(512)
		require.NoError(t, err)
		done, err := srv.Snapshot(stuck.SandboxID) // never ends
		require.NoError(t, err)
		defer done()
		start := time.Now()
		assert.Equal(t, 1, srv.Shutdown(), "the other one paused")
		assert.Equal(t, 3*fakeagentenv.TransitionWait+time.Millisecond, time.Since(start), "60 s in each of three passes, and one pause")
		states := srv.States()
		assert.Equal(t, fakeagentenv.Snapshotting, states[stuck.SandboxID])
		assert.Equal(t, fakeagentenv.Paused, states[other.SandboxID])
	})
}

// AgentENV's pause that joins a pause in progress waits for it 60 s at
// most (wait_for_transition's WAIT_TRANSITION_TIMEOUT), then answers 409
// naming the state pausing; the double waited for ever. In virtual time.
func TestJoinedPauseWaitsAMinuteAtMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PauseBase: 90 * time.Second})
		require.NoError(t, err)
		sb, err := srv.Create(512)
		require.NoError(t, err)
		h := srv.Handler()
		pause := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sandboxes/"+sb.SandboxID+"/pause", nil))
			return rec
		}
		first := make(chan int, 1)
		go func() { first <- pause().Code }()
		synctest.Wait()
		start := time.Now()

		joined := pause()
		assert.Equal(t, http.StatusConflict, joined.Code)
		assert.Contains(t, joined.Body.String(), "sandbox cannot be paused from pausing state")
		assert.Equal(t, fakeagentenv.TransitionWait, time.Since(start))
		assert.Equal(t, http.StatusNoContent, pause().Code, "joined again: the pause's end")
		assert.Equal(t, 90*time.Second, time.Since(start))
		assert.Equal(t, http.StatusNoContent, <-first)
	})
}
