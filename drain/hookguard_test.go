package drain_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/kube"
)

type podState struct {
	ts  time.Time
	err error
}

func (p podState) DeletionTimestamp(context.Context) (time.Time, error) { return p.ts, p.err }

// Who may start a drain: each refusal answers 403, never reaches the hook,
// and is logged with its reason and without the secret a request carried.
func TestHookGuardRefusesEveryoneButTheSecretsHolder(t *testing.T) {
	var logs bytes.Buffer
	reached := 0
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })
	guarded := func(g drain.HookGuard) http.Handler {
		g.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		return g.Wrap(hook)
	}
	call := func(h http.Handler, remote string, hdr map[string]string) int {
		r := httptest.NewRequest("GET", "/drain", nil)
		r.RemoteAddr = remote
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	withSecret := guarded(drain.HookGuard{Secret: "s3cret"})
	for name, tc := range map[string]struct {
		h      http.Handler
		remote string
		hdr    map[string]string
		reason string
	}{
		"no header":         {withSecret, "127.0.0.1:5", nil, "no X-Drain-Secret header"},
		"wrong secret":      {withSecret, "10.0.0.9:5", map[string]string{"X-Drain-Secret": "guess"}, "wrong X-Drain-Secret"},
		"other header":      {guarded(drain.HookGuard{Secret: "s3cret", Header: "X-Other"}), "10.0.0.9:5", map[string]string{"X-Drain-Secret": "s3cret"}, "no X-Other header"},
		"no secret, remote": {guarded(drain.HookGuard{}), "10.0.0.9:5", nil, "not from loopback"},
		"pod not terminating": {guarded(drain.HookGuard{Secret: "s3cret", Check: drain.RequireTerminating(podState{err: kube.ErrNotTerminating}, time.Second)}),
			"10.0.0.9:5", map[string]string{"X-Drain-Secret": "s3cret"}, "not terminating"},
	} {
		logs.Reset()
		assert.Equal(t, http.StatusForbidden, call(tc.h, tc.remote, tc.hdr), name)
		assert.Contains(t, logs.String(), tc.reason, name)
		assert.Contains(t, logs.String(), "remote="+tc.remote, name)
		assert.NotContains(t, logs.String(), "guess", "%s: the secret given is not logged", name)
	}
	assert.Zero(t, reached, "no refused request reached the hook")

	assert.Equal(t, 200, call(withSecret, "10.0.0.9:5", map[string]string{"X-Drain-Secret": "s3cret"}))
	assert.Equal(t, 200, call(guarded(drain.HookGuard{}), "127.0.0.1:5", nil), "no secret: loopback only")
	assert.Equal(t, 200, call(guarded(drain.HookGuard{}), "[::1]:5", nil))
	terminating := guarded(drain.HookGuard{Secret: "s3cret", Check: drain.RequireTerminating(podState{ts: time.Now()}, time.Second)})
	assert.Equal(t, 200, call(terminating, "10.0.0.9:5", map[string]string{"X-Drain-Secret": "s3cret"}))
	unreadable := guarded(drain.HookGuard{Secret: "s3cret", Check: drain.RequireTerminating(podState{err: errors.New("403 from the API server")}, time.Second)})
	assert.Equal(t, 200, call(unreadable, "10.0.0.9:5", map[string]string{"X-Drain-Secret": "s3cret"}),
		"a pod that cannot be read is not refused: the secret vouched for the request")
	assert.Equal(t, 5, reached)
	assert.False(t, strings.Contains(logs.String(), "s3cret"), "the secret is never logged")
}

// A secret read from a Kubernetes Secret often ends in a newline (a file
// made with `openssl rand -hex 32 > f`, then --from-file): both the server
// and drainhook read it from the same variable, newline and all. HTTP
// carries no white space at either end of a header value, so it is no part
// of the secret on either side: the kubelet's httpGet hook (its
// httpHeaders hold the secret without it) and drainhook are let through.
// Before, the guard refused the one with "wrong X-Drain-Secret", and
// drainhook could not send the other at all ("invalid header field
// value"): the drain never started. A secret of white space alone lets
// nothing through.
func TestHookSecretEndingInANewlineIsTheSecret(t *testing.T) {
	const secret = "0f3c9d2a5b\n"
	guard := &drain.HookGuard{Secret: secret}
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"done": true, "reason": "no sandbox running"}`))
	})))
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/drain", nil)
	req.Header.Set("X-Drain-Secret", "0f3c9d2a5b") // the kubelet's httpGet hook
	resp, err := http.DefaultClient.Do(req)
	if assert.NoError(t, err) {
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the httpGet hook is let through")
	}

	sum, err := drain.ExecHook{URL: srv.URL + "/drain", Secret: secret, MaxFailures: 1}.Run(t.Context())
	if assert.NoError(t, err, "drainhook sends the secret") {
		assert.True(t, sum.Done)
	}

	blank := httptest.NewServer((&drain.HookGuard{Secret: " \n"}).Wrap(http.NotFoundHandler()))
	defer blank.Close()
	resp, err = http.Get(blank.URL) // loopback, no header
	if assert.NoError(t, err) {
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a blank secret is no secret, and no loopback pass either")
	}
}

// Fault (a review of the hook's surfaces): every refused request was
// logged, so a flood from the pod network, where untrusted sandboxes run,
// cost the node's logs a line a request. Now a line a second for each
// reason: the first refusal at once, the rest of its second counted in one
// line when the second is up, nothing refused uncounted, and a refusal of
// another reason (the kubelet's call with a wrong secret) logged at once.
//
//	0 s      a refusal: logged
//	0–0.9 s  999 more: held
//	1 s      one line: refused=999
//	5 s      a refusal: logged at once
func TestHookGuardLogsAFloodOfRefusalsOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		h := (&drain.HookGuard{Secret: "s3cret", Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Wrap(http.NotFoundHandler())
		refuse := func() {
			r := httptest.NewRequest("GET", "/drain", nil)
			r.RemoteAddr = "10.0.0.9:5"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, http.StatusForbidden, w.Code)
		}
		refuse()
		for range 999 {
			time.Sleep(900 * time.Microsecond)
			refuse()
		}
		assert.Equal(t, 1, strings.Count(logs.String(), "\n"), "one line in the first second")
		r := httptest.NewRequest("GET", "/drain", nil)
		r.RemoteAddr = "10.0.0.1:5"
		r.Header.Set("X-Drain-Secret", "stale")
		h.ServeHTTP(httptest.NewRecorder(), r)
		assert.Contains(t, logs.String(), "wrong X-Drain-Secret", "another reason: at once")
		time.Sleep(time.Second)
		synctest.Wait()
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		require.Len(t, lines, 3)
		assert.Contains(t, lines[2], "refused=999")
		assert.Contains(t, lines[2], "last.reason=\"no X-Drain-Secret header\"")
		time.Sleep(4 * time.Second)
		refuse()
		assert.Len(t, strings.Split(strings.TrimSpace(logs.String()), "\n"), 4, "a refusal after a quiet second is logged at once")
	})
}

// notTerminatingPod is a pod with no deletionTimestamp whose read, as
// kube.Pod's, fails once its context has ended.
type notTerminatingPod struct{}

func (notTerminatingPod) DeletionTimestamp(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, kube.ErrNotTerminating
}

// RequireTerminating with a timeout that is not positive gave its read no
// time: the read failed at once, and a read that fails lets the request
// through, so the check refused nothing, a pod that was not terminating
// included, where its doc says it refuses a drain then; with a nil
// DeletionReader it panicked at the hook's first call, the drain's start.
// Both now panic when the guard is built, as Gate.Middleware does for a
// nil classify.
func TestRequireTerminatingRefusesANoOpCheckWhenBuilt(t *testing.T) {
	check := drain.RequireTerminating(notTerminatingPod{}, time.Second)
	require.Error(t, check(httptest.NewRequest("GET", "/drain", nil)), "a pod not terminating is refused")
	for _, timeout := range []time.Duration{0, -time.Second} {
		assert.PanicsWithValue(t,
			"drain: RequireTerminating: timeout must be positive, got "+timeout.String()+": a read with no time fails, and a failed read lets every request through",
			func() { drain.RequireTerminating(notTerminatingPod{}, timeout) }, "timeout %v", timeout)
	}
	assert.PanicsWithValue(t, "drain: RequireTerminating: nil DeletionReader (a *kube.Pod from kube.New)",
		func() { drain.RequireTerminating(nil, time.Second) })
}

// unansweredPod is a pod whose read, as kube.Pod's against an API server
// that does not answer (overloaded, a network partition), waits until its
// context ends.
type unansweredPod struct{}

func (unansweredPod) DeletionTimestamp(ctx context.Context) (time.Time, error) {
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// Fault (docs/faults.md row 2741): the kubelet's grace runs from its call
// of the hook, and the preStop handler took T0 when the guard let the call
// through, after RequireTerminating's read of the pod: an API server that
// did not answer held the call for the read's timeout, and T0, so SIGKILL,
// was planned that much after the kubelet's. T0 is now the call's arrival.
//
//	0 s  the kubelet calls the hook; the guard reads the pod: no answer
//	2 s  the read gives up, the call is let through; T0 = 0 s, SIGKILL 30 s
func TestAGuardsReadOfThePodDoesNotMoveT0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := deadline.New(30*time.Second, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: b, Sandboxes: draintest.NewNode()})
		require.NoError(t, err)
		guard := drain.HookGuard{Check: drain.RequireTerminating(unansweredPod{}, 2*time.Second)}
		r := httptest.NewRequest("GET", "/drain?wait=0s", nil)
		r.RemoteAddr = "127.0.0.1:5"
		called := time.Now()
		guard.Wrap(d.PreStop()).ServeHTTP(httptest.NewRecorder(), r)
		require.Equal(t, 2*time.Second, time.Since(called), "the guard's read ran to its timeout")
		assert.Equal(t, called, b.Start(), "T0 is the kubelet's call, not the end of the guard's read")
		assert.Equal(t, called.Add(30*time.Second), b.Kill())
		d.Shutdown(t.Context())
	})
}
