//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/httpsource"
	"github.com/drainkit/drainkit/ublk"
)

func TestParseArgs(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseArgs([]string{"-listen", "127.0.0.1:9", "-grace", "1h", "-concurrency", "16",
		"-daemon", "ublkd  --socket /run/u.sock", "-report", "/tmp/r.json",
		"-ublk-kernel", "fixed=6.8.0-1[0-9][0-9]-generic", "-ublk-kernel", "vulnerable=6.8.0-*", "--", "server", "-x"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "fixed=6.8.0-1[0-9][0-9]-generic,vulnerable=6.8.0-*", c.kernels.String())
	assert.Equal(t, "127.0.0.1:9", c.listen)
	assert.Equal(t, time.Hour, c.grace)
	assert.Equal(t, 16, c.concurrency)
	assert.Equal(t, []string{"ublkd", "--socket", "/run/u.sock"}, c.daemon)
	assert.Equal(t, "/tmp/r.json", c.report)
	assert.Equal(t, []string{"server", "-x"}, c.server)
	// The manifest's terminationGracePeriodSeconds as it is (row 376).
	c, err = parseArgs([]string{"-grace", "3600", "-kubelet-grace", "25", "--", "server"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, c.grace)
	assert.Equal(t, 25*time.Second, c.kubelet)

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{}, "SERVER_COMMAND"},
		{[]string{"--"}, "SERVER_COMMAND"},
		{[]string{"server"}, `follow "--"`},
		{[]string{"-grace", "0s", "--", "s"}, "-grace"},
		{[]string{"-concurrency", "-1", "--", "s"}, "-concurrency"},
		{[]string{"-kubelet-grace", "-3s", "--", "s"}, "-kubelet-grace"},
		{[]string{"-listen", "", "--", "s"}, "-listen"},
		{[]string{"-ublk-kernel", "safe=6.8.*", "--", "s"}, "-ublk-kernel"},
	} {
		_, err := parseArgs(bad.args, &stderr)
		require.Error(t, err, "%q", bad.args)
		assert.Contains(t, err.Error(), bad.says, "%q", bad.args)
	}
}

// An IPv6 address without brackets in -listen or -hook-listen (a
// manifest's "$(POD_IP):8082" on an IPv6 pod) is bad usage naming the flag
// and the brackets: it was taken, and failed only at the listen, exit 1
// ("too many colons in address"); without the hook secret it was called
// "not a loopback address" even for ::1.
func TestUnbracketedIPv6AddressIsNamedWithTheBrackets(t *testing.T) {
	t.Setenv(EnvHookSecret, "s")
	for _, args := range [][]string{
		{"-hook-listen", "fd00:10:244::5:8082"},
		{"-hook-listen", "::1:8082"},
		{"-listen", "fd00:10:244::5:8081"},
	} {
		_, err := parseArgs(append(args, "--", "server"), io.Discard)
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), args[0]+" "+args[1], "names the flag")
		assert.Contains(t, err.Error(), "in brackets", "%v", args)
	}
	_, err := parseArgs([]string{"-hook-listen", "127.0.0.1", "--", "server"}, io.Discard)
	assert.ErrorContains(t, err, "-hook-listen 127.0.0.1 is not host:port")
	cfg, err := parseArgs([]string{"-hook-listen", "[fd00:10:244::5]:8082", "-listen", "[::]:8081", "--", "server"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "[fd00:10:244::5]:8082", cfg.hookListen)
	t.Setenv(EnvHookSecret, "")
	_, err = parseArgs([]string{"-hook-listen", "[::1]:8082", "--", "server"}, io.Discard)
	assert.NoError(t, err, "IPv6 loopback needs no secret")
	_, err = parseArgs([]string{"-hook-listen", "::1:8082", "--", "server"}, io.Discard)
	assert.ErrorContains(t, err, "in brackets", "not called 'not a loopback address'")
}

// Bad usage exits 2; a -state-dir the machine does not have, 1 (row 1170).
func TestBadConfigurationFailsAtStartNamingTheFlag(t *testing.T) {
	for _, c := range []struct {
		flag string
		args []string
		code int
	}{
		{"-server-url", []string{"-server-url", "127.0.0.1:8080", "--", "true"}, 2},
		{"-grace", []string{"-grace", "100ms", "--", "true"}, 2}, // step reserves do not fit
		{"-state-dir", []string{"-state-dir", filepath.Join(t.TempDir(), "missing"), "--", "true"}, 1},
	} {
		var stderr bytes.Buffer
		code := Main(t.Context(), c.args, &stderr)
		assert.Equal(t, c.code, code, c.flag)
		assert.Contains(t, stderr.String(), c.flag)
	}
}

// The supervisor passes SIGUSR1 on to the server at once, but not SIGTERM:
// the server gets its SIGTERM from the shutdown, and the supervisor exits
// with the server's status.
func TestForwardsSignalsAndExitsWithTheServersStatus(t *testing.T) {
	dir := t.TempDir()
	signals, report := filepath.Join(dir, "signals"), filepath.Join(dir, "report.json")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "10s", "-report", report},
		helperCommand("stubserver", "-listen", api, "-signals", signals, "-exit", "7"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "readyz 200")
	assert.Equal(t, 200, get(ctx, "http://"+listen+"/healthz"))
	// The server traps its signals before it listens: once it answers, a
	// forwarded SIGHUP cannot hit it before its handler is in place.
	require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/sandboxes") == 200 }, 10*time.Second, 20*time.Millisecond, "server answers")

	// One at a time: two signals in flight at once may reach the server's
	// signal loop in either order.
	sup.signal(t, syscall.SIGUSR1)
	require.Eventually(t, func() bool { b, _ := os.ReadFile(signals); return string(b) == "user defined signal 1\n" },
		5*time.Second, 20*time.Millisecond, "server got SIGUSR1")

	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 7, sup.exitCode(t, 10*time.Second))
	b, _ := os.ReadFile(signals)
	assert.Equal(t, "user defined signal 1\nterminated\n", string(b), "one SIGTERM, from the server step")

	rep := readReport(t, report)
	assert.Equal(t, 7, rep.ExitCode)
	assert.True(t, rep.Server.Exited)
	assert.Equal(t, 7, rep.Server.Code)
	assert.False(t, rep.Server.Killed)
	require.NotNil(t, rep.Drain)
	require.NotNil(t, rep.Drain.Phase(StepServer))
	assert.Contains(t, rep.Drain.Phase(StepServer).Error, "exited 7")
	assert.Positive(t, rep.Drain.Headroom)
}

// Orphans re-parented to the supervisor are reaped (no zombies), and
// reaping them never steals the server's exit status.
func TestReapsOrphansWithoutStealingTheServersStatus(t *testing.T) {
	dir := t.TempDir()
	report, release := filepath.Join(dir, "report.json"), filepath.Join(dir, "release")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "10s", "-report", report},
		helperCommand("stubserver", "-listen", api, "-orphans", "3", "-release", release, "-exit", "5"))
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond, "readyz 200")
	assert.Len(t, childrenOf(sup.pid()), 4, "the server and three orphans, re-parented to the subreaper")
	// The orphans exit once released and must not stay zombies: in the end
	// the supervisor's only child is the server.
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	require.Eventually(t, func() bool { return len(childrenOf(sup.pid())) == 1 }, 10*time.Second, 20*time.Millisecond, "orphans reaped")

	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 5, sup.exitCode(t, 10*time.Second))
	rep := readReport(t, report)
	assert.Equal(t, 3, rep.OrphansReaped)
	assert.Equal(t, 5, rep.Server.Code)
}

// A server that dies on its own takes the supervisor down with its status,
// after the daemon was stopped cleanly.
func TestServerDyingOnItsOwnStopsTheDaemonAndExitsWithItsStatus(t *testing.T) {
	dir := t.TempDir()
	report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "10s", "-report", report,
			"-daemon", strings.Join(daemonCommand(t, dir, events), " ")},
		helperCommand("stubserver", "-listen", api, "-die-when", filepath.Join(dir, "die"), "-exit", "3"),
		EnvSysfsRoot+"="+filepath.Join(dir, "sys"), EnvProcfsRoot+"="+emptyProcfs(filepath.Join(dir, "sys")))
	daemonStarted(t, events) // a SIGTERM before its handler would kill it
	require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))
	assert.Equal(t, 3, sup.exitCode(t, 10*time.Second))
	rep := readReport(t, report)
	assert.Equal(t, 3, rep.ExitCode)
	assert.Nil(t, rep.Drain)
	assert.Contains(t, rep.Note, "exited on its own")
	require.NotNil(t, rep.Daemon)
	assert.Equal(t, "exited 0", rep.Daemon.String())
	assert.Contains(t, readFile(t, events), "exit")
	require.NotNil(t, rep.Ublk)
	assert.Equal(t, ublk.VerdictStopped, rep.Ublk.Verdict)
	assert.Len(t, rep.Ublk.Devices, 2)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// A pause still in flight at the preserve deadline may finish only until
// the server step's deadline: the daemon keeps its whole reserve.
func TestInFlightPausesNeverEatTheDaemonsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `[{"id":"slow","state":"running"}]`)
		})
		mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // a pause that outlasts everything
		})
		cfg, err := parseArgs([]string{"-grace", "100s", "-daemon", "ublkd", "--", "server"}, io.Discard)
		require.NoError(t, err)
		cfg.client = &http.Client{Transport: handlerTransport{mux}}
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)

		// The supervisor's own steps, with their work replaced: no children
		// run here, and only the time each step is given matters.
		steps := make([]drain.Step, len(sup.steps))
		for i, st := range sup.steps {
			steps[i] = drain.NewStep(st.Phase(), func(context.Context) (any, error) { return nil, nil })
		}
		d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.src, Preserver: sup.preserver, Steps: steps})
		require.NoError(t, err)

		t0 := time.Now()
		sup.budget.OnSIGTERM(t0) // SIGKILL at t0+100s, deadline t0+95s
		assert.Equal(t, t0.Add(85*time.Second), d.Plan().Deadline(StepServer), "95s minus the daemon's 10s")
		rep := d.Shutdown(context.Background())

		require.NotNil(t, rep.Preserve)
		assert.Equal(t, t0.Add(85*time.Second), rep.Preserve.Hard, "in-flight pauses end at the server step's deadline")
		assert.Equal(t, 1, rep.Preserve.Counts[pause.TimedOut])
		daemon := rep.Phase(StepDaemon)
		require.NotNil(t, daemon)
		assert.Equal(t, 10*time.Second, daemon.Deadline.Sub(daemon.Start), "the daemon step kept its whole reserve")
	})
}

// The teardown steps' reserves are sized from the grace the kubelet uses:
// kubectl delete --grace-period=30 (or an eviction with a shorter grace) of
// a supervisor whose -grace is AgentENV's hour gives its steps the reserves
// of a 30 s supervisor, 3 s each. Before, they stayed sized from -grace,
// 30 s each: the daemon step, critical, took all the time the margin left,
// the server step none, and the preserve phase none either: every sandbox
// lost.
//
//	0 s     SIGTERM (grace 3600 s); the deletion's 30 s read: SIGKILL at 30 s
//	        8 sandboxes running, paused in 1 s each
//	21 s    the preserve deadline: 27 s (the 30 s grace's 3 s margin) minus the
//	        two steps' 3 s
func TestTeardownReservesFollowTheGraceADeletionGave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 8, fakeagentenv.Config{PauseBase: time.Second})
		cfg, err := parseArgs([]string{"-api", "agentenv", "-grace", "3600s", "-daemon", "ublkd", "--", "server"}, io.Discard)
		require.NoError(t, err)
		cfg.apiKey, cfg.client = "k", &http.Client{Transport: handlerTransport{srv.Handler()}}
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		// The supervisor's own steps, with their work replaced: no children
		// run here, and only the time each step is given matters.
		steps := make([]drain.Step, len(sup.steps))
		for i, st := range sup.steps {
			steps[i] = drain.NewStep(st.Phase(), func(context.Context) (any, error) { return nil, nil })
		}
		d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.counted, Preserver: sup.preserver, Steps: steps})
		require.NoError(t, err)
		reserves := func() map[string]time.Duration {
			m := map[string]time.Duration{}
			for _, w := range d.Plan().Windows("") {
				m[w.Name] = w.Reserve
			}
			return m
		}
		assert.Equal(t, 30*time.Second, reserves()[StepDaemon], "-grace's hour: 30 s")

		t0 := time.Now()
		sup.budget.OnSIGTERM(t0)
		require.True(t, sup.budget.Tighten(t0.Add(30*time.Second)), "the deletion's 30 s (kube.Pod reads it)")
		r := reserves()
		assert.Equal(t, 3*time.Second, r[StepServer], "a 30 s grace's server step")
		assert.Equal(t, 3*time.Second, r[StepDaemon], "a 30 s grace's daemon step")
		rep := d.Shutdown(context.Background())

		require.NotNil(t, rep.Preserve)
		// The budget's deadline is 27 s: the 30 s's default margin is 3 s.
		assert.Equal(t, t0.Add(21*time.Second), rep.Preserve.Deadline, "27 s minus the steps' 3 s each")
		assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved], "preserved of 8 (%v)", rep.Preserve.Counts)
		daemon := rep.Phase(StepDaemon)
		require.NotNil(t, daemon)
		assert.Equal(t, t0.Add(27*time.Second), daemon.Deadline, "the daemon step ends at the budget's deadline")
	})
}

// handlerTransport serves requests with a handler in-process, for code
// under testing/synctest. A request whose context ends first fails with
// the context's cause (context.Cause), as net/http's Transport returns it,
// so that code under test sees why its request was cut.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil { // a server never hands its handler a nil Body
		r = r.Clone(r.Context())
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); t.h.ServeHTTP(rec, r) }()
	select {
	case <-done:
		return rec.Result(), nil
	case <-r.Context().Done():
		<-done
		return nil, context.Cause(r.Context())
	}
}

// The operator's -ublk-kernel declarations reach the daemon step's kernel
// decision.
func TestKernelDeclarationsReachTheDaemonStep(t *testing.T) {
	cfg, err := parseArgs([]string{"-daemon", "ublkd", "-ublk-kernel", "exit-may-hang=*", "--", "server"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	d := sup.teardown.KernelDecision()
	assert.Equal(t, ublk.KernelExitMayHang, d.Class)
	assert.Equal(t, "declared", d.Rule)
	assert.Equal(t, "flag", d.Declaration.Source)
}

func TestAPIFlags(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseArgs([]string{"-api", "agentenv", "--", "server"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:8000", c.serverURL, "AgentENV serves its API on 8000")
	assert.Equal(t, httpsource.AgentENV(), c.api.Config(), "the preset alone")

	t.Setenv(EnvAPIKey, "from-env")
	c, err = parseArgs([]string{"--", "server"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, "from-env", c.api.Config().APIKey)
	assert.Equal(t, "http://127.0.0.1:8080", c.serverURL)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	c, err = parseArgs([]string{"-api-key-file", keyFile, "--", "server"}, &stderr)
	require.NoError(t, err, "the key file is httpsource's to read, at newSupervisor")
	assert.Equal(t, keyFile, c.api.Config().APIKeyFile, "the file wins")
	assert.Empty(t, c.api.Config().APIKey)

	// A key file that cannot be read, or is empty, still stops the
	// supervisor at start, naming it, before any child is started: exit 1
	// for a file the machine does not give, 2 for one whose content is
	// refused (no error of the kernel's tells it from a refused flag: row
	// 1170).
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for _, f := range []struct {
		file, says string
		code       int
	}{{keyFile, keyFile + ": no such file", 1}, {empty, empty + " is empty", 2}} {
		var stderr bytes.Buffer
		code := Main(t.Context(), []string{"-api-key-file", f.file, "--", "/nonexistent/server"}, &stderr)
		assert.Equal(t, f.code, code, stderr.String())
		assert.Contains(t, stderr.String(), "-api-key-file")
		assert.Contains(t, stderr.String(), f.says)
	}

	// A key from DRAINKIT_API_KEY with a control character inside (a
	// trailing newline, from a Secret made from a file, is trimmed) stops
	// the supervisor at start, naming the variable and the byte, never the
	// key: no request could carry it.
	t.Setenv(EnvAPIKey, "s3cret\nold\n")
	stderr.Reset()
	code := Main(t.Context(), []string{"-listen", freeAddr(t), "-hook-listen", freeAddr(t), "--", "/nonexistent/server"}, &stderr)
	assert.Equal(t, 2, code, stderr.String())
	assert.Contains(t, stderr.String(), "supervisor: $"+EnvAPIKey+": byte 7 of 10 is 0x0a")
	assert.NotContains(t, stderr.String(), "s3cret")
	t.Setenv(EnvAPIKey, "")

	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"-api", "e2b", "--", "s"}, "-api"},
		{[]string{"-next-token", "x-next-token", "--", "s"}, "-next-token"},
		{[]string{"-daemon", "d", "-daemon-socket", "/run/d.sock", "--", "s"}, "-daemon-socket"},
	} {
		_, err := parseArgs(bad.args, &stderr)
		require.Error(t, err, "%q", bad.args)
		assert.Contains(t, err.Error(), bad.says, "%q", bad.args)
	}
}

// The preset with one setting overridden: the list is paged and keyed as
// AgentENV's, by a different id field.
func TestAgentENVPresetTakesSingleOverrides(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("x-next-token", "2")
			fmt.Fprint(w, `[{"vmID":"a","state":"running","memoryMB":512}]`)
			return
		}
		fmt.Fprint(w, `[{"vmID":"b","state":"running","memoryMB":512}]`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := parseArgs([]string{"-api", "agentenv", "-id-field", "vmID", "-server-url", srv.URL, "--", "s"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(c, io.Discard)
	require.NoError(t, err)
	ids, err := sup.src.RunningIDs(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, ids)
}

// Fault (docs/faults.md row 230): a wrong API key before any drain showed
// only as a pod that never turned Ready: GET /readyz answered 503 with the
// server's 401 in its body, which the kubelet keeps to itself, and no log
// line said so. The first listing the server refuses is now logged at
// Warn, naming the status, the X-API-Key header and where the key came
// from, once however often the kubelet probes; the first that succeeds
// again is logged at Info, once.
func TestWrongAPIKeyIsLoggedOnceWhileReadinessFails(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("K\n"), 0o600)) // mistyped: the server's is "k"
	for _, tc := range []struct {
		name, env string
		args      []string
		from      string // where the Warn line says the key came from
		sent      string // the key the supervisor sends
	}{
		{"file", "", []string{"-api-key-file", keyFile}, "-api-key-file " + keyFile, "K"},
		{"env", "K", nil, EnvAPIKey, "K"},
		{"none", "", nil, "no key configured", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvAPIKey, tc.env)
			srv, _ := agentenvDouble(t, 1, fakeagentenv.Config{})
			api := httptest.NewServer(srv.Handler())
			defer api.Close()
			var logs logbuf.Buffer
			readyz := readinessOf(t, append(tc.args, "-api", "agentenv", "-server-url", api.URL), "", &logs)

			for range 3 { // the kubelet's probes
				code, body := readyz()
				assert.Equal(t, http.StatusServiceUnavailable, code)
				assert.Contains(t, body, "401 Unauthorized")
			}
			out := logs.String()
			warns := linesAt(out, "WARN")
			require.Len(t, warns, 1, "one Warn for three probes refused alike:\n%s", out)
			assert.Contains(t, warns[0], "status=401")
			assert.Contains(t, warns[0], "X-API-Key")
			assert.Contains(t, warns[0], tc.from)

			srv.SetAPIKey(tc.sent) // the operator fixed the key: the one sent is the server's
			for range 2 {
				code, body := readyz()
				assert.Equal(t, http.StatusOK, code, body)
			}
			out = logs.String()
			assert.Equal(t, 1, strings.Count(out, `level=INFO msg="supervisor: the server accepts the API key`), out)
			assert.Equal(t, 1, strings.Count(out, " level=WARN "), "nothing more at Warn:\n%s", out)
		})
	}
}

func TestChildrenDoNotInheritTheAPIKey(t *testing.T) {
	env := childEnv([]string{"PATH=/bin", EnvAPIKey + "=secret", "DRAINKIT_API_KEY_FILE=x"})
	assert.Equal(t, []string{"PATH=/bin", "DRAINKIT_API_KEY_FILE=x"}, env)
}

// Both daemons, the supervisor's own child (-daemon) and the server's
// (-daemon-socket), are torn down by a ublk step that runs the last resort
// by default: on a kernel not known fixed, VMMs of this pod still holding
// a disk at the last-resort point are killed so the daemon can stop its
// devices and exit before SIGKILL.
func TestDaemonStepRunsTheLastResortByDefault(t *testing.T) {
	for name, args := range map[string][]string{
		"-daemon":        {"-daemon", "ublkd"},
		"-daemon-socket": {"-daemon-socket", filepath.Join(t.TempDir(), "ublkd.sock")},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := parseArgs(append(args, "--", "server"), io.Discard)
			require.NoError(t, err)
			sup, err := newSupervisor(cfg, io.Discard)
			require.NoError(t, err)
			require.NotNil(t, sup.teardown)
			assert.True(t, sup.teardown.LastResort())
			assert.Contains(t, sup.drainer.Plan().Phases(), StepDaemon)
		})
	}
}

// GET /metrics on -listen: the supervisor's own OpenTelemetry metrics in
// Prometheus's format, the API requests it made among them.
func TestMetricsInPrometheusFormat(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `[{"id": "a", "state": "running"}, {"id": "b", "state": "running"}]`)
	}))
	defer api.Close()
	cfg, err := parseArgs([]string{"-server-url", api.URL, "--", "server"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.drainer.Force() // ends the preStop wait
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "http://127.0.0.1/drain?wait=0s", nil)
	req.RemoteAddr = "127.0.0.1:40000" // the hook answers loopback only, without a secret
	sup.hookRoutes().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	rec = httptest.NewRecorder()
	sup.routes().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	body := rec.Body.String()
	assert.Regexp(t, `(?m)^drainkit_drain_sandboxes_running 2$`, body)
	t.Logf("metrics:\n%s", body)
	assert.Contains(t, body, "drainkit_httpsource_request_duration_seconds_count{")
}

// drainOnce drains an AgentENV double with n running sandboxes of 512 MiB
// (a pause takes 20 ms, 40 ms a GiB: disk-bound, no knee below the
// ceiling) through a supervisor made from args, as SIGTERM would with
// ample time, keeps what it learned as the supervisor does at exit, and
// returns the drain's Report and the supervisor's log.
func drainOnce(t *testing.T, n int, args ...string) (*drain.Report, string) {
	var rep *drain.Report
	var logs bytes.Buffer
	synctest.Test(t, func(t *testing.T) {
		srv, err := fakeagentenv.New(fakeagentenv.Config{PausePerGiB: 40 * time.Millisecond})
		require.NoError(t, err)
		for range n {
			_, err := srv.Create(512)
			require.NoError(t, err)
		}
		cfg, err := parseArgs(append(args, "-api", "agentenv", "-grace", "1h", "--", "server"), io.Discard)
		require.NoError(t, err)
		cfg.client = &http.Client{Transport: handlerTransport{srv.Handler()}}
		sup, err := newSupervisor(cfg, &logs)
		require.NoError(t, err)
		steps := make([]drain.Step, len(sup.steps)) // no children here: only the preserve phase matters
		for i, st := range sup.steps {
			steps[i] = drain.NewStep(st.Phase(), func(context.Context) (any, error) { return nil, nil })
		}
		d, err := drain.New(drain.Config{Budget: sup.budget, Sandboxes: sup.src, Preserver: sup.preserver, Steps: steps})
		require.NoError(t, err)
		sup.budget.OnSIGTERM(time.Now())
		rep = d.Shutdown(context.Background())
		sup.learned.Save(rep, sup.budget, sup.steps)
	})
	return rep, logs.String()
}

// With -state-dir, what a drain learned is where the next supervisor's
// adaptive limit goes: the first drain climbs 8, 16, 32 and learns 32; the
// next one runs its first epoch at 8, finds its pauses on the learned
// estimate's pace, and goes straight to 32, where its first drain spent a
// round at 16. Without -state-dir nothing is kept, and -concurrency fixes
// the limit whatever was learned.
func TestLearnedConcurrencyIsWhereTheNextDrainGoes(t *testing.T) {
	dir := t.TempDir()
	rep, logs := drainOnce(t, 256, "-state-dir", dir)
	require.Zero(t, rep.Lost())
	assert.Equal(t, 32, rep.Preserve.LearnedLimit)
	assert.Contains(t, logs, "from=8 to=16", "the first drain climbs")
	r, err := learned.Read(filepath.Join(dir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 32, r.LearnedLimit)
	assert.Equal(t, 32, r.MaxLimit, "adaptive: the ceiling, for drainkit plan")
	assert.Equal(t, 20*time.Millisecond, r.Estimate, "512 MiB at 40 ms a GiB")

	rep, logs = drainOnce(t, 256, "-state-dir", dir)
	require.Zero(t, rep.Lost())
	assert.Contains(t, logs, "learned_concurrency=32", "loaded at start")
	assert.Contains(t, logs, "from=8 to=32", "straight to the learned level after the first epoch")
	assert.NotContains(t, logs, "to=16")

	_, logs = drainOnce(t, 256, "-state-dir", dir, "-concurrency", "4")
	assert.NotContains(t, logs, "concurrency changed", "a fixed -concurrency")
	r, err = learned.Read(filepath.Join(dir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 32, r.LearnedLimit, "a fixed drain learns none: the last one is kept")
	assert.Equal(t, 4, r.Limit)
	assert.Zero(t, r.MaxLimit, "a fixed limit")
}

// Fault (docs/faults.md row 236): the supervisor read -api-key-file once,
// at start. A key rotated in the mounted Secret while it ran was never
// sent: readiness failed on 401, and at the drain every pause was refused
// and every sandbox lost. The file is now read again when it changes.
func TestRotatedAPIKeyFileIsSent(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "api-key")
	write := func(key string) { // as a Secret volume is updated: a new file swapped in
		require.NoError(t, os.WriteFile(keyFile+".tmp", []byte(key+"\n"), 0o600))
		require.NoError(t, os.Rename(keyFile+".tmp", keyFile))
	}
	write("k1")
	srv, _ := agentenvDouble(t, 1, fakeagentenv.Config{})
	srv.SetAPIKey("k1")
	api := httptest.NewServer(srv.Handler())
	defer api.Close()
	cfg, err := parseArgs([]string{"-api-key-file", keyFile, "-api", "agentenv", "-server-url", api.URL, "--", "server"}, io.Discard)
	require.NoError(t, err)
	sup, err := newSupervisor(cfg, io.Discard)
	require.NoError(t, err)
	defer sup.learned.Close()
	readyz := func() int {
		rec := httptest.NewRecorder()
		sup.routes().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code
	}
	require.Equal(t, http.StatusOK, readyz(), "the first key")
	srv.SetAPIKey("k2")
	write("k2")
	assert.Equal(t, http.StatusOK, readyz(), "the rotated key")
}
