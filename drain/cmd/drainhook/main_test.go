package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) {
	containerLog = "" // never this machine's PID 1; the tests below give it
	goleak.VerifyTestMain(m)
}

func TestExitsZeroWhenTheDrainWaitIsOver(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Done: true, Reason: "drained"})
	}))
	defer srv.Close()
	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL}, &log))
	assert.Contains(t, log.String(), "drain wait over")
}

// Fault (a helper's review): the hook exited 0 when no request of it ever
// reached the server's drain (nothing listening, or a 403 for a secret
// missing or wrong). The kubelet goes on to SIGTERM whatever an exec hook
// returns, but only one that failed gets a FailedPreStopHook event and its
// output in the kubelet's log: the drain that never started, and why, were
// in no event, no log and no exit status. The hook now exits 1 then, so the
// event says the hook failed and the kubelet's log (at -v=1) says why; the
// pod is not held longer for it.
func TestExitsNonZeroWhenTheServerNeverGotTheHook(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	var log strings.Builder
	assert.Equal(t, 1, run([]string{"-url", "http://" + addr + "/drain", "-failures", "2", "-retry", "1ms"}, &log))
	assert.Contains(t, log.String(), "2 consecutive failures")
	assert.Contains(t, log.String(), "no drain wait")

	t.Setenv(drain.EnvHookSecret, "wrong")
	srv := httptest.NewServer((&drain.HookGuard{Secret: "s3cret"}).Wrap(http.NotFoundHandler()))
	defer srv.Close()
	log.Reset()
	assert.Equal(t, 1, run([]string{"-url", srv.URL + "/drain"}, &log))
	assert.Contains(t, log.String(), "403 Forbidden")
	assert.NotContains(t, log.String(), "wrong\"", "the secret is not in the output")
}

// Once the server answered, the drain is its: a hook that loses it after
// (the server gone mid-wait) exits 0, the server's Report saying the rest,
// and the kubelet records no failure of a drain that ran.
func TestExitsZeroWhenTheServerAnsweredThenWentAway(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Reason: "waiting", Running: 1, DrainDeadline: time.Now().Add(time.Hour)})
	}))
	defer srv.Close()
	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL + "/drain", "-failures", "2", "-retry", "1ms"}, &log))
	assert.Contains(t, log.String(), "2 consecutive failures")
}

func TestBadFlagIsAUsageError(t *testing.T) {
	var log strings.Builder
	assert.Equal(t, 2, run([]string{"-nope"}, &log))
	// -h asks for the usage: printed, exit 0, as drainkit's commands (it
	// exited 2, the standard flag package's status for a bad flag).
	log.Reset()
	assert.Equal(t, 0, run([]string{"-h"}, &log))
	assert.Contains(t, log.String(), "-url")
}

// Fault (a fresh-eyes review): a manifest's slip was taken silently. The URL
// given without -url was ignored (the hook called the default port, failed
// five times and let the pod go without its drain wait); a negative
// -timeout, -failures or -retry meant the default, and a negative
// -max-wait no bound at all. Each is a usage error now, before any request, naming what
// is wrong.
func TestMisusedFlagsAreUsageErrorsNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"http://127.0.0.1:9/drain"}, `unexpected argument "http://127.0.0.1:9/drain" (the URL goes in -url)`},
		{[]string{"-url", "127.0.0.1:8080/drain"}, `-url "127.0.0.1:8080/drain": want an http:// or https:// URL`},
		{[]string{"-timeout", "-1s"}, "-timeout must not be negative, got -1s"},
		{[]string{"-failures", "-3"}, "-failures must not be negative, got -3"},
		{[]string{"-retry", "-1ms"}, "-retry must not be negative, got -1ms"},
		{[]string{"-max-wait", "-1m"}, "-max-wait must not be negative, got -1m0s"},
		{[]string{"-timeout", "5"}, `invalid value "5" for flag -timeout: want a duration with its unit (5ms, 5s, 5m)`}, // row 376
	} {
		var log strings.Builder
		assert.Equal(t, 2, run(tc.args, &log), tc.args)
		assert.Contains(t, log.String(), tc.says, tc.args)
	}
}

// Fault (a fresh-eyes review): with no -url the hook called
// 127.0.0.1:8080, the API port, where no drainkit server serves the hook
// since it moved to a listener of its own: drain.Server (EnvHookListen),
// sandboxd and the supervisor all serve GET /drain on 127.0.0.1:8082 by
// default. A manifest that relied on the default got five 404s or refusals
// and no drain wait at all. The default is where the hook is.
func TestDefaultURLReachesTheHookWhereDrainkitServesIt(t *testing.T) {
	t.Setenv(drain.EnvHookListen, "")              // unset: drain.Server's default
	ln, err := net.Listen("tcp", "127.0.0.1:8082") // drain.EnvHookListen's default
	if err != nil {
		t.Skipf("127.0.0.1:8082, drainkit's default hook address, is taken here: %v", err)
	}
	d := emptyDrainer(t)
	hooks := http.NewServeMux()
	hooks.Handle("GET /drain", (&drain.HookGuard{}).Wrap(d.PreStop()))
	srv := &http.Server{Handler: hooks}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-failures", "1"}, &log))
	assert.Contains(t, log.String(), "drain wait over")
	assert.True(t, d.Gate().Closed(), "the call reached the Drainer: the drain started")
	require.NoError(t, d.Shutdown(context.Background()).Err())
}

// An exec hook runs in the server's container, with its environment: when
// DRAINKIT_HOOK_SECRET is set, the server's HookGuard refuses every call
// without it, even from loopback, so drainhook sends it. Before, it had no
// way to: every call was refused, and the kubelet gave up on the hook at
// the end of the grace period, leaving SIGTERM its 2 s floor.
func TestSecretFromTheContainersEnvironmentIsSent(t *testing.T) {
	t.Setenv(drain.EnvHookSecret, "s3cret")
	d := emptyDrainer(t)
	srv := httptest.NewServer((&drain.HookGuard{Secret: "s3cret"}).Wrap(d.PreStop()))
	defer srv.Close()

	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL + "/drain"}, &log))
	assert.Contains(t, log.String(), "drain wait over", log.String())
	assert.True(t, d.Gate().Closed(), "the call reached the Drainer: the drain started")
	require.NoError(t, d.Shutdown(context.Background()).Err())
}

// The hook speaks to its own pod, never through a proxy: the kubelet's own
// httpGet hook uses none, but a container often has HTTP_PROXY in its
// environment (a cluster's egress proxy), which Go's default transport
// honours for any address but loopback. A hook URL on the pod's address
// then went to the proxy, secret and all, and the proxy's 403 ended the
// hook at once as a refusal. The URL here is 0.0.0.0, this host, which
// Go's proxy rule does not exempt as it does loopback; the test runs in a
// child process, because Go reads the proxy variables once per process.
func TestHookNeverGoesThroughAProxy(t *testing.T) {
	if os.Getenv("DRAINHOOK_TEST_PROXY") == "" {
		var proxied atomic.Int32
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxied.Add(1)
			http.Error(w, "proxy: forbidden", http.StatusForbidden)
		}))
		defer proxy.Close()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHookNeverGoesThroughAProxy$", "-test.count=1")
		cmd.Env = append(os.Environ(), "DRAINHOOK_TEST_PROXY=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "%s", out)
		assert.Zero(t, proxied.Load(), "requests that went to the proxy")
		return
	}
	for _, secret := range []string{"", "s3cret"} {
		t.Run("secret="+secret, func(t *testing.T) {
			t.Setenv(drain.EnvHookSecret, secret)
			srv := httptest.NewServer((&drain.HookGuard{Secret: secret}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Done: true, Reason: "drained"})
			})))
			defer srv.Close()
			_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
			require.NoError(t, err)
			var log strings.Builder
			assert.Equal(t, 0, run([]string{"-url", "http://0.0.0.0:" + port + "/drain", "-failures", "1"}, &log))
			assert.Contains(t, log.String(), "drain wait over", log.String())
			srv.CloseClientConnections()
		})
	}
}

// Fault (a helper's review): a -url that names another handler answering
// 200 with a JSON object (a /version, a status page) decoded as a summary
// of a wait not over, with no drain deadline: the hook asked again at once,
// without a pause, until the kubelet killed it at the grace period's end,
// leaving SIGTERM its 2 s floor, and the server's drain never started. A
// 200 whose body is not a PreStop summary (every one has a reason) is now
// a refusal: the hook stops at once, exit status 1, naming it.
func TestAnswerThatIsNotAPreStopSummaryEndsTheHook(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"version":"1.2.3"}`))
	}))
	defer srv.Close()
	var log strings.Builder
	assert.Equal(t, 1, run([]string{"-url", srv.URL + "/version", "-max-wait", "1s"}, &log))
	assert.Equal(t, int32(1), calls.Load(), "asked once")
	assert.Contains(t, log.String(), "not a drain.PreStop summary")
}

// Fault (a review of drainhook): an answer with a reason but no drain
// deadline, and not over, passed for a drain.PreStop summary, where every
// summary not over carries the drain deadline: another handler's JSON
// object with a "reason" of its own (a status, a health check) was a wait
// not over with no deadline, asked again at once, without a pause, until
// the kubelet's grace ran out and past it, to SIGKILL (the hook is not
// killed when the kubelet stops waiting for it). Measured with -max-wait
// 1s: before, 9,399 calls in the second and exit 0, as if a drain had run;
// after, one call and exit 1.
func TestAnswerWithAReasonButNoDrainDeadlineEndsTheHook(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"status":"draining","reason":"preStop"}`))
	}))
	defer srv.Close()
	var log strings.Builder
	assert.Equal(t, 1, run([]string{"-url", srv.URL + "/status", "-max-wait", "1s"}, &log))
	assert.Equal(t, int32(1), calls.Load(), "asked once")
	assert.Contains(t, log.String(), "not a drain.PreStop summary")
}

// Fault (a review of drainhook): the hook asked the server to answer
// within 90 % of the time left to the drain deadline as left x 9 / 10,
// which wraps round past the largest Duration: a drain deadline 32.5 to 65
// years away (a manifest's "never": terminationGracePeriodSeconds of 50
// years, which the kubelet v1.34 times without overflow) made the product
// negative and the wait asked 0s, which drain.PreStop answers as soon as it
// has counted. Every poll came back at once, not over, and was made again
// at once: against a real Drainer, 15,937 polls in 2.5 s with ?wait=0s,
// the hook's loop and the server's taking the CPU from the drain. Now each
// poll asks for 900 ms, the -timeout 1s less a tenth, as for any deadline
// past it.
func TestDrainDeadlineDecadesAwayIsPolledAtTheTimeout(t *testing.T) {
	b, err := deadline.New(1576800000*time.Second, deadline.Config{}) // 50 years
	require.NoError(t, err)
	node := draintest.NewNode()
	node.AddN("sb", 1, 10*time.Millisecond) // running: the drain wait goes on
	d, err := drain.New(drain.Config{Budget: b, Sandboxes: node})
	require.NoError(t, err)
	var calls atomic.Int32
	var otherWaits atomic.Int32
	preStop := d.PreStop()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Query().Get("wait") != "900ms" {
			otherWaits.Add(1)
		}
		preStop.ServeHTTP(w, r)
	}))
	defer srv.Close()

	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL + "/drain", "-timeout", "1s", "-max-wait", "2500ms"}, &log))
	assert.Zero(t, otherWaits.Load(), "every poll asks for ?wait=900ms")
	assert.LessOrEqual(t, calls.Load(), int32(3), "one poll per 900 ms in 2.5 s")
	require.NoError(t, d.Shutdown(context.Background()).Err())
}

// A hook that got no drain wait says why in the container's log too: the
// kubelet's FailedPreStopHook event says only "PreStopHook failed", and
// the hook's own output reaches only the kubelet's log, at -v=1. The
// line goes to the stderr of the container's PID 1, here a child process
// whose stderr is this test's pipe, opened through /proc as in a pod.
func TestNoDrainWaitIsSaidInTheContainersLog(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	pid1 := exec.Command("sleep", "60")
	pid1.Stderr = w
	require.NoError(t, pid1.Start())
	w.Close() // the child holds the write end
	defer func() { _ = pid1.Process.Kill(); _ = pid1.Wait() }()

	var log strings.Builder
	assert.Equal(t, 1, run([]string{"-url", closedURL(t), "-failures", "1", "-container-log", fmt.Sprintf("/proc/%d/fd/2", pid1.Process.Pid)}, &log))
	require.NoError(t, r.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err, "hook's own log:\n%s", log.String())
	assert.Contains(t, line, "level=ERROR")
	assert.Contains(t, line, "the server never answered the hook: no drain wait")
	assert.Contains(t, line, "the request failed", "-failures 1")
	assert.Contains(t, line, "connection refused", "and why")
}

// The container's log gets the hook's last line only when the hook ended
// without its drain wait: once the server said the wait is over, the
// server's own log says the rest.
func TestContainersLogGetsOnlyAHookWithoutItsDrainWait(t *testing.T) {
	file := filepath.Join(t.TempDir(), "container.log")
	require.NoError(t, os.WriteFile(file, []byte("the server's line\n"), 0o600))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Done: true, Reason: "drained"})
	}))
	defer srv.Close()
	assert.Equal(t, 0, run([]string{"-url", srv.URL, "-container-log", file}, io.Discard))
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "the server's line\n", string(got))

	assert.Equal(t, 1, run([]string{"-url", closedURL(t), "-failures", "1", "-container-log", file}, io.Discard))
	got, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(got), "the server's line\n"), "appended, never truncated: %q", got)
	assert.Contains(t, string(got), "no drain wait")
}

// Writing to the container's log never holds the hook: a FIFO that no one
// reads (a runtime's log reader gone) fails at once, and so does a path
// that is not there (no /proc); each is said in the hook's own log.
func TestContainersLogThatCannotTakeTheLineDoesNotHoldTheHook(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, path := range []string{fifo, filepath.Join(t.TempDir(), "missing")} {
		var log strings.Builder
		assert.Equal(t, 1, run([]string{"-url", closedURL(t), "-failures", "1", "-container-log", path}, &log))
		assert.Contains(t, log.String(), "drainhook: -container-log: open "+path)
	}
}

// closedURL is a drain URL on a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/drain"
}

// Fault: a refusal's log line gave the status alone, "403 Forbidden", and
// the hook's guess ("a wrong URL, or a secret missing or wrong"), where the
// server's answer names what is wrong: a secret not in the hook's
// environment and a wrong one need different fixes, and a HookGuard Check
// (RequireTerminating) refuses for neither. The line now carries the
// answer's first words, on one line.
func TestRefusalSaysWhatTheServerSaid(t *testing.T) {
	guard := &drain.HookGuard{Secret: "s3cret", Check: func(r *http.Request) error {
		if r.Header.Get("X-Drain-Secret") == "s3cret" {
			return errors.New("the pod is not terminating (no deletionTimestamp)")
		}
		return nil
	}}
	srv := httptest.NewServer(guard.Wrap(http.NotFoundHandler()))
	defer srv.Close()
	for secret, want := range map[string]string{
		"":       "403 Forbidden: forbidden: no X-Drain-Secret header",
		"wrong":  "403 Forbidden: forbidden: wrong X-Drain-Secret",
		"s3cret": "403 Forbidden: forbidden: the pod is not terminating (no deletionTimestamp)",
	} {
		t.Setenv(drain.EnvHookSecret, secret)
		var log strings.Builder
		assert.Equal(t, 1, run([]string{"-url", srv.URL + "/drain"}, &log))
		assert.Contains(t, log.String(), want, "secret %q", secret)
		assert.NotContains(t, log.String(), "wrong\"", "the secret is not in the output")
	}
}

// Fault: a manifest's slip (the URL given without -url, a -url without its
// scheme, -timeout 5 with no unit, a flag misspelt) ended the hook with
// exit status 2 before any request, the drain never started, and why was
// written only to the hook's own output: the kubelet's FailedPreStopHook
// event says "PreStopHook failed" and its log has the output only at -v=1,
// so nobody with kubectl learned why, where a hook that got no drain wait
// for any other reason says it in the container's log (row 375). A usage
// error now says it there too.
func TestUsageErrorIsSaidInTheContainersLog(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-container-log", "LOG", "http://127.0.0.1:8082/drain"}, `unexpected argument \"http://127.0.0.1:8082/drain\" (the URL goes in -url)`},
		{[]string{"-container-log", "LOG", "-url", "127.0.0.1:8082/drain"}, `-url \"127.0.0.1:8082/drain\": want an http:// or https:// URL`},
		{[]string{"-container-log", "LOG", "-timeout", "5"}, `invalid value \"5\" for flag -timeout`},
		{[]string{"-container-log", "LOG", "-ulr", "http://127.0.0.1:8082/drain"}, "flag provided but not defined: -ulr"},
	} {
		file := filepath.Join(t.TempDir(), "container.log")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		args := append([]string(nil), tc.args...)
		args[1] = file
		var log strings.Builder
		assert.Equal(t, 2, run(args, &log), tc.args)
		got, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Contains(t, string(got), "level=ERROR", tc.args)
		assert.Contains(t, string(got), "drainhook: bad flag or argument: no drain wait", tc.args)
		assert.Contains(t, string(got), tc.says, tc.args)
		assert.Equal(t, 1, strings.Count(string(got), "\n"), "one line: %q", got)
	}
	// -h asks for the usage: no fault, nothing in the container's log.
	file := filepath.Join(t.TempDir(), "container.log")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	assert.Equal(t, 0, run([]string{"-container-log", file, "-h"}, io.Discard))
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Empty(t, string(got))
}

// Fault: a -url whose port is no TCP port (a typo: 80820; or 0) passed the
// check: every request failed at the dial ("invalid port", or "connection
// refused" for port 0, which reads as nothing listening), five times a
// second apart, 4 s of the grace period, and the hook exited 1 as if the
// server had never answered. A -url that does not parse was refused with a
// message that hid why (http://127.0.0.1:-1/drain: "want an http:// or
// https:// URL"). Both are usage errors now, before any request, naming
// what is wrong.
func TestURLWithNoTCPPortIsAUsageErrorNamingIt(t *testing.T) {
	for _, tc := range []struct {
		url  string
		says string
	}{
		{"http://127.0.0.1:80820/drain", `-url "http://127.0.0.1:80820/drain": port 80820 is no TCP port (1-65535)`},
		{"http://127.0.0.1:0/drain", `-url "http://127.0.0.1:0/drain": port 0 is no TCP port (1-65535)`},
		{"http://127.0.0.1:-1/drain", `invalid port ":-1" after host`},
		{"http://127.0.0.1 /drain", `invalid character " " in host name`},
	} {
		var log strings.Builder
		assert.Equal(t, 2, run([]string{"-url", tc.url}, &log), "a usage error, before any request: %s", tc.url)
		assert.Contains(t, log.String(), tc.says, tc.url)
	}
	// A port in range, and none (the scheme's), pass.
	assert.NoError(t, check(nil, drain.ExecHook{URL: "http://127.0.0.1:65535/drain"}))
	assert.NoError(t, check(nil, drain.ExecHook{URL: "https://node.example/drain"}))
}

// Fault: the hook's default -url was drain.Server's default hook address,
// 127.0.0.1:8082, whatever DRAINKIT_HOOK_LISTEN said in the container's
// environment, which the hook shares with the server (it reads
// DRAINKIT_HOOK_SECRET there). A server whose hook listens elsewhere (the
// README's manifest puts it on [$(POD_IP)]:8082; another port) got no call:
// five connections refused, exit 1, no drain wait. An exec hook's command
// cannot name the pod's address either: the kubelet does not expand
// $(POD_IP) in lifecycle hooks (kubernetes/kubernetes#129502), and the
// images drainhook is for have no shell. The default is now where the
// variable says the server serves the hook; a -url given still wins.
func TestDefaultURLFollowsTheServersHookListen(t *testing.T) {
	d := emptyDrainer(t)
	srv := httptest.NewServer((&drain.HookGuard{Secret: "s3cret"}).Wrap(d.PreStop()))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	t.Setenv(drain.EnvHookSecret, "s3cret")
	for _, listen := range []string{"[127.0.0.1]:" + port, "0.0.0.0:" + port, ":" + port} {
		t.Setenv(drain.EnvHookListen, listen) // as the manifest sets it for the server
		var log strings.Builder
		assert.Equal(t, 0, run([]string{"-failures", "1"}, &log), "%s: %s", listen, log.String())
		assert.Contains(t, log.String(), "drain wait over", listen)
	}
	assert.True(t, d.Gate().Closed(), "the calls reached the Drainer: the drain started")
	require.NoError(t, d.Shutdown(context.Background()).Err())

	// A -url given wins; a variable that is no listen address, with none
	// given, is a usage error naming it, as the server refuses it at start.
	t.Setenv(drain.EnvHookListen, "127.0.0.1:1")
	var log strings.Builder
	assert.Equal(t, 0, run([]string{"-url", srv.URL + "/drain", "-failures", "1"}, &log), log.String())
	t.Setenv(drain.EnvHookListen, "fd00::5:8082")
	log.Reset()
	assert.Equal(t, 2, run(nil, &log))
	assert.Contains(t, log.String(), `DRAINKIT_HOOK_LISTEN="fd00::5:8082" is not host:port: an IPv6 address goes in brackets`)
	log.Reset()
	assert.Equal(t, 0, run([]string{"-url", srv.URL + "/drain", "-failures", "1"}, &log), log.String())
}

// emptyDrainer is a Drainer with a minute's grace and no sandboxes: its
// preStop wait is over at the first count.
func emptyDrainer(t *testing.T) *drain.Drainer {
	b, err := deadline.New(time.Minute, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: b,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })})
	require.NoError(t, err)
	return d
}
