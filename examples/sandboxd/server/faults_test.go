//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/servingtest"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/ublk"
)

// Fault: timeout_s of 9223372037 overflows time.Duration and the sandbox was deleted at
// once. A timeout above MaxTimeoutS is refused with 400; the largest one allowed creates
// the sandbox, running (that it runs until that timeout, its timer not overflowed, is
// TestSandboxOfTheLargestTimeoutRunsUntilIt's, in examples/internal/sandbox, in virtual
// time).
func TestHugeTimeoutIsRefusedNotOverflowed(t *testing.T) {
	st := start(t, testConfig(t))
	code, _, body := call(t, "POST", st.base+"/sandboxes", `{"timeout_s": 9223372037}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, "timeout_s")
	code, _, body = call(t, "POST", st.base+"/sandboxes", fmt.Sprintf(`{"timeout_s": %d}`, 315360000))
	require.Equal(t, http.StatusCreated, code, body)
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	code, _, body = call(t, "GET", st.base+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, v["id"])
	assert.Equal(t, 1, st.s.Node().Count("running"), "the sandbox is running")
}

// A record holding an overflowing timeout (written by hand, or by an older server) is a
// damaged record: reported and not loaded, never resumed into a sandbox that is deleted
// at once.
func TestRecordWithHugeTimeoutIsAProblem(t *testing.T) {
	cfg := testConfig(t)
	writeRecord(t, cfg.StateDir, store.Record{ID: "sb-huge", State: "paused", Runtime: "fake", TimeoutS: 9223372037})
	st := start(t, cfg)
	require.Len(t, st.s.Problems, 1)
	assert.Contains(t, st.s.Problems[0].Err, "timeout_s")
}

// The create body is strict: trailing data after the object, field names in another
// case, a repeated field and a fractional timeout are all 400.
func TestCreateBodyIsStrict(t *testing.T) {
	st := start(t, testConfig(t))
	for _, bad := range []string{
		`{"timeout_s": 5} garbage`, `{"timeout_s": 5}{}`, `{"Timeout_S": 5}`, `{"TIMEOUT_S": 5}`,
		`{"timeout_s": 5, "timeout_s": 6}`, `{"timeout_s": 5.5}`, `{"timeout_s": "5"}`, `[5]`,
	} {
		code, _, body := call(t, "POST", st.base+"/sandboxes", bad)
		assert.Equal(t, http.StatusBadRequest, code, "body %q: %s", bad, body)
	}
	code, _, body := call(t, "POST", st.base+"/sandboxes", " {\"timeout_s\": 5}\n")
	assert.Equal(t, http.StatusCreated, code, "white space around the object is fine: %s", body)
}

// Fault: the images directory cannot be written ("images" is a file). The pause fails
// with the real error, the sandbox is still running (the fake runtime used to forget it
// first, so every retry said "is not running"), a retry fails the same way, and once
// the directory is fixed the pause succeeds.
func TestImageWriteErrorLeavesTheSandboxRunning(t *testing.T) {
	cfg := testConfig(t)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "images"), nil, 0o600))
	st := start(t, cfg)
	id := createSandbox(t, st.base)
	for range 2 {
		code, _, body := call(t, "POST", st.base+"/sandboxes/"+id+"/pause", "")
		assert.Equal(t, http.StatusInternalServerError, code)
		assert.Contains(t, body, "not a directory")
		assert.NotContains(t, body, "not running")
		assert.Equal(t, 1, st.s.Node().Count("running"))
	}
	require.NoError(t, os.Remove(filepath.Join(cfg.StateDir, "images")))
	code, _, body := call(t, "POST", st.base+"/sandboxes/"+id+"/pause", "")
	assert.Equal(t, http.StatusOK, code, body)
}

// A record that cannot be written after the runtime paused the sandbox (the records
// directory is gone, a file in its place) undoes the pause: the sandbox is running, as
// the node says, and the error is the real one; once the directory is back the pause
// succeeds.
func TestRecordWriteErrorUndoesThePause(t *testing.T) {
	cfg := testConfig(t)
	st := start(t, cfg)
	id := createSandbox(t, st.base)
	records := filepath.Join(cfg.StateDir, "records")
	require.NoError(t, os.Rename(records, records+".away"))
	require.NoError(t, os.WriteFile(records, nil, 0o600))
	code, _, body := call(t, "POST", st.base+"/sandboxes/"+id+"/pause", "")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "not a directory")
	assert.Equal(t, 1, st.s.Node().Count("running"))
	require.NoError(t, os.Remove(records))
	require.NoError(t, os.Rename(records+".away", records))
	code, _, body = call(t, "POST", st.base+"/sandboxes/"+id+"/pause", "")
	assert.Equal(t, http.StatusOK, code, body)
}

// Fault: a FIFO named x.rec in the records directory hung startup forever, and a huge
// record was read into memory. Both are reported as problems; startup goes on.
func TestFIFOAndHugeRecordDoNotHangStartup(t *testing.T) {
	cfg := testConfig(t)
	records := filepath.Join(cfg.StateDir, "records")
	require.NoError(t, os.MkdirAll(records, 0o700))
	require.NoError(t, syscall.Mkfifo(filepath.Join(records, "x.rec"), 0o600))
	huge, err := os.Create(filepath.Join(records, "huge.rec"))
	require.NoError(t, err)
	require.NoError(t, huge.Truncate(1<<30)) // sparse: 1 GB that takes no disk
	huge.Close()
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(records, "link.rec")))

	done := make(chan *started, 1)
	go func() { done <- start(t, cfg) }()
	var st *started
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("startup hangs on a FIFO record")
	}
	var errs []string
	for _, p := range st.s.Problems {
		errs = append(errs, filepath.Base(p.Path)+": "+p.Err)
	}
	require.Len(t, errs, 3, "%q", errs)
	assert.Contains(t, strings.Join(errs, "\n"), "huge.rec: ")
	assert.Contains(t, strings.Join(errs, "\n"), "not a regular file")
	assert.Contains(t, strings.Join(errs, "\n"), "larger than")
}

// Fault: a record's image path was trusted: a crafted record pointing outside the state
// directory made resume read that file and delete it. The image path comes from the state
// directory: the file outside is never touched.
func TestRecordImagePathIsNeverTrusted(t *testing.T) {
	cfg := testConfig(t)
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte(`{"id":"sb-evil","uptime_ns":1}`), 0o600))
	writeRecord(t, cfg.StateDir, store.Record{ID: "sb-evil", State: "paused", Runtime: "fake", Image: victim, TimeoutS: 60})
	st := start(t, cfg)
	code, _, body := call(t, "POST", st.base+"/sandboxes/sb-evil/resume", "")
	assert.NotEqual(t, http.StatusOK, code, "no image of its own in the state directory: %s", body)
	_, err := os.Stat(victim)
	assert.NoError(t, err, "the file outside the state directory is still there")
}

// Fault: -pause-jitter NaN passed the [0, 1) check.
func TestNaNJitterIsRejected(t *testing.T) {
	_, err := ParseFlags([]string{"-state-dir", "x", "-pause-jitter", "NaN"}, io.Discard)
	require.ErrorContains(t, err, "-pause-jitter")
}

// -pause-share is the fake runtime's, and a count: a negative one, or one given with
// runsc (whose checkpoints share the node as they do), is refused naming the flag.
func TestPauseShareIsTheFakeRuntimesCount(t *testing.T) {
	for _, args := range [][]string{{"-pause-share", "-1"}, {"-runtime", "runsc", "-pause-share", "4"}} {
		_, err := ParseFlags(append([]string{"-state-dir", "x"}, args...), io.Discard)
		require.ErrorContains(t, err, "-pause-share", "%v", args)
	}
	c, err := ParseFlags([]string{"-state-dir", "x", "-pause-share", "4"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 4, c.PauseShare)
}

// Fault: when last-shutdown.json cannot be written the per-sandbox account was lost with
// it. Each sandbox not preserved is logged, one line each, whatever happens to the file.
func TestEachLostSandboxIsLoggedEvenIfTheReportCannotBeWritten(t *testing.T) {
	cfg := testConfig(t)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "images"), nil, 0o600)) // every pause fails
	require.NoError(t, os.Mkdir(filepath.Join(cfg.StateDir, ReportFile), 0o700))        // the report cannot be written
	var logs logbuf.Buffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	var ids []string
	for range 3 {
		info, err := s.Node().Create(context.Background(), 60)
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as a signal would
	rep, err := s.Run(ctx)
	require.Error(t, err, "the report cannot be written")
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 3, rep.Preserve.Lost())
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "sandbox not preserved") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 3, logs.String())
	for i, id := range ids {
		assert.Contains(t, strings.Join(lines, "\n"), "id="+id, "line %d", i)
	}
	assert.Contains(t, lines[0], "not a directory")
	assert.Contains(t, lines[0], "outcome="+string(pause.Failed))
}

// Fault: a shutdown whose preserve phase left no pause Report (its
// Preserver abandoned at the hard deadline) logged nothing of the
// sandboxes the drain had counted, so with the Report unwritable no line
// said that any were unaccounted for.
func TestSandboxesUnaccountedForAreLogged(t *testing.T) {
	var logs logbuf.Buffer
	s := &Server{logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s.logLost(&drain.Report{Unaccounted: 4, Phases: []drain.PhaseReport{{Name: drain.PhasePreserve,
		Result: drain.Abandoned, Error: "the Preserver did not return by the hard deadline"}}})
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "sandboxes unaccounted for")
	assert.Contains(t, logs.String(), "count=4")
	assert.Contains(t, logs.String(), "preserve=abandoned")
}

// Fault: SIGHUP and SIGQUIT killed sandboxd at once: no report, every sandbox lost, the
// device daemon killed through Pdeathsig. A real sandboxd process gets both: SIGHUP is
// logged and ignored, SIGQUIT dumps the goroutines and sandboxd goes on; SIGTERM then
// preserves every sandbox and sandboxd exits 0 with its daemon stopped cleanly.
func TestHangupAndQuitDoNotKillSandboxd(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	p, stderr := startWithADevice(t, dir, addr)
	base := "http://" + addr
	waitStarted(t, base, stderr)
	ids := []string{createSandbox(t, base), createSandbox(t, base)}

	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		require.NoError(t, p.Cmd.Process.Signal(sig))
	}
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "goroutine dump") },
		10*time.Second, 20*time.Millisecond, "SIGQUIT's dump: %s", stderr)
	code, _, _ := call(t, "GET", base+"/healthz", "")
	require.Equal(t, http.StatusOK, code, "sandboxd is alive after SIGHUP and SIGQUIT")
	assert.Contains(t, stderr.String(), "SIGHUP ignored")

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.Wait(t, 20*time.Second, "sandboxd did not exit: %s", stderr), "exit status 0: %s", stderr)
	st, err := store.Open(filepath.Join(dir, "records"))
	require.NoError(t, err)
	recs, _, err := st.Load()
	require.NoError(t, err)
	assert.Len(t, recs, len(ids), "every sandbox paused and recorded")
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "device daemon exited on its own: %s", events)
}

// Fault: sandboxd served its API before it handled SIGTERM. Run started serving, then
// registered SIGHUP and SIGQUIT, then SIGTERM and SIGINT: a signal that came once the API
// answered (the kubelet's SIGTERM just after a probe passed, an operator's SIGHUP) still had
// its default action, and sandboxd died at once, with no drain and no Report, its device
// daemon killed through Pdeathsig with its device live. The connections waiting in the
// listener's queue are answered the moment serving starts, while Run is still on its way to
// the handlers: a SIGTERM sent at /healthz's first answer killed sandboxd in 43 of 100 runs
// (under load). Every handler is now in place before the API serves.
func TestSIGTERMAsSoonAsTheAPIAnswersDrains(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	p, stderr := startWithADevice(t, dir, addr)
	require.Eventually(t, func() bool { // every millisecond: a request waits in the listener's queue when serving starts
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 20*time.Second, time.Millisecond, "sandboxd did not start: %s", stderr)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM, as soon as the API answers")

	require.NoError(t, p.Wait(t, 20*time.Second, "sandboxd did not exit: %s", stderr), "drained, exit status 0, not killed by the SIGTERM: %s", stderr)
	_, err := os.Stat(filepath.Join(dir, ReportFile))
	require.NoError(t, err, "the Report is written")
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "device daemon stopped and exited on its own: %s", events)
}

// Fault: sandboxd handled SIGTERM only once it served, and its start takes a while: the
// state directory's lock, the device daemon, the sandboxes' records (with runsc, a
// `runsc` call each). A SIGTERM in that window (a pod deleted while it starts: a rollout
// scaled back, a node drained) had its default action: sandboxd died at once, exit by
// signal, no Report, and its device daemon with it through its Pdeathsig, devices and
// all. The timeline now:
//
//	sandboxd: lock taken, device daemon running, start held
//	kubelet:  SIGTERM                    -> logged at once; sandboxd goes on starting
//	sandboxd: start ends                 -> drains at once: the Report, the daemon stops
//	                                        on its own, exit 0; the budget from the SIGTERM
func TestSIGTERMWhileStartingDrainsOnceStarted(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(t.TempDir(), "gate")
	p, stderr := startWithADevice(t, dir, freeAddr(t), holdStartEnv+"="+gate)
	sent, released := startsigtest.SIGTERMWhileHeld(t, p, stderr, gate, "SIGTERM while sandboxd starts")

	require.NoError(t, p.Wait(t, 30*time.Second, "sandboxd did not exit: %s", stderr), "drained, exit status 0: %s", stderr)
	startsigtest.CountedFromSIGTERM(t, filepath.Join(dir, ReportFile), sent, released)
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "device daemon stopped and exited on its own: %s", events)
}

// startWithADevice starts sandboxd as a real process on the state directory dir, its API on
// addr, with the fake runtime and one fake device, and returns it and its stderr.
func startWithADevice(t *testing.T, dir, addr string, env ...string) (*pid1test.Process, *logbuf.Buffer) {
	t.Helper()
	// A hook address of its own: the default 127.0.0.1:8082 is the supervisor's too, whose
	// tests may run at the same time.
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "6s",
		"-pause-latency", "50ms", "-devices", "1")
	cmd.Env = append(append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0"), env...)
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	return pid1test.Start(t, cmd), &stderr
}

func writeRecord(t *testing.T, stateDir string, r store.Record) {
	t.Helper()
	data, err := store.Encode(r)
	require.NoError(t, err)
	dir := filepath.Join(stateDir, "records")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, r.ID+".rec"), data, 0o600))
}

// Who may start a drain (issue 18, item 14). The API port does not serve the hook; the
// hook's own port refuses a request without the secret or with a wrong one (403, logged,
// the gate still open); only the secret's holder drains. A hook listening beyond
// loopback without a secret is refused at start; the state directory and the device
// daemon's socket are owner-only.
func TestOnlyTheHookSecretStartsADrain(t *testing.T) {
	cfg := testConfig(t)
	cfg.HookSecret = "kubelet-only"
	require.NoError(t, os.Chmod(cfg.StateDir, 0o755)) // as an operator might have made it
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()
	t.Cleanup(func() { cancel(); <-done })
	base, hook := "http://"+s.Addr(), "http://"+s.HookAddr()

	code, _, _ := call(t, "GET", base+"/drain", "")
	assert.Equal(t, http.StatusNotFound, code, "the API port does not serve the hook")
	code, _, _ = call(t, "GET", hook+"/drain", "")
	assert.Equal(t, http.StatusForbidden, code, "no secret")
	req, err := http.NewRequest("GET", hook+"/drain?wait=1ms", nil)
	require.NoError(t, err)
	req.Header.Set("X-Drain-Secret", "guess")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "wrong secret")
	assert.Contains(t, logs.String(), "preStop request refused")
	assert.NotContains(t, logs.String(), "guess")
	code, _, _ = call(t, "GET", base+"/readyz", "")
	assert.Equal(t, http.StatusOK, code, "no refused request closed the gate")

	req.Header.Set("X-Drain-Secret", "kubelet-only")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	code, _, _ = call(t, "GET", base+"/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code, "the secret's holder drained the node")

	fi, err := os.Stat(cfg.StateDir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "state dir owner-only")
	fi, err = os.Stat(filepath.Join(cfg.StateDir, "ublkd.sock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "device daemon socket owner-only")

	bad := testConfig(t)
	bad.HookListen = "0.0.0.0:0"
	_, err = New(context.Background(), bad, nil)
	require.ErrorContains(t, err, "-hook-listen")
	assert.ErrorContains(t, err, HookSecretEnv)
	bad.HookSecret = "\n" // a Secret file's newline alone: drain.HookGuard would let nothing through
	_, err = New(context.Background(), bad, nil)
	assert.ErrorContains(t, err, HookSecretEnv, "white space alone is no secret")
}

// An IPv6 address without brackets in -listen or -hook-listen (a manifest's
// "$(POD_IP):8082" on an IPv6 pod) is bad usage naming the flag and the brackets: it was
// taken, and failed only at the listen, after the state directory's lock and the device
// daemon, exit 1 ("too many colons in address"); without the hook secret it was called
// "not a loopback address" even for ::1.
func TestUnbracketedIPv6AddressIsNamedWithTheBrackets(t *testing.T) {
	t.Setenv(HookSecretEnv, "s")
	for _, args := range [][]string{
		{"-hook-listen", "fd00:10:244::5:8082"},
		{"-hook-listen", "::1:8082"},
		{"-listen", "fd00:10:244::5:8080"},
	} {
		_, err := ParseFlags(append([]string{"-state-dir", "x"}, args...), io.Discard)
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), args[0]+" "+args[1], "names the flag")
		assert.Contains(t, err.Error(), "in brackets", "%v", args)
	}
	cfg, err := ParseFlags([]string{"-state-dir", "x", "-hook-listen", "[fd00:10:244::5]:8082", "-listen", "[::]:8080"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "[fd00:10:244::5]:8082", cfg.HookListen)
	t.Setenv(HookSecretEnv, "")
	_, err = ParseFlags([]string{"-state-dir", "x", "-hook-listen", "[::1]:8082"}, io.Discard)
	assert.NoError(t, err, "IPv6 loopback needs no secret")
}

// A -pause-latency whose spread, x (1 + -pause-jitter), is longer than the largest
// Duration (292 years) saturates there, and no grace fits one round of it: bad usage
// naming the flags. It wrapped round to a negative estimate, which the floor of a
// millisecond took: sandboxd started and planned 1 ms a pause (-pause-latency 2562047h
// alone was refused).
func TestPauseLatencyPastTheLargestDurationIsRefusedNotWrapped(t *testing.T) {
	cfg := testConfig(t)
	cfg.Devices = 0
	cfg.PauseLatency, cfg.PauseJitter = 2562047*time.Hour, 0.5
	assert.Equal(t, time.Duration(math.MaxInt64), cfg.PauseEstimate())
	s, err := New(context.Background(), cfg, nil)
	if err == nil {
		s.Close()
	}
	require.ErrorAs(t, err, new(usageError), "bad usage: Main exits 2")
	assert.ErrorContains(t, err, "-pause-latency 2562047h0m0s")
}

// -devices beyond what the fake device daemon can be given is bad usage naming the flag:
// its devices go to it in one environment variable, which the kernel caps at 128 KiB, so
// from about 3000 devices sandboxd exited 1 at start with "device daemon: fakeublk: start
// daemon: fork/exec ...: argument list too long", naming no flag. MaxDevices fits, with
// the longest state directory whose socket path a Unix socket takes.
func TestMoreFakeDevicesThanTheDaemonTakesIsNamed(t *testing.T) {
	_, err := ParseFlags([]string{"-state-dir", "x", "-devices", "5000"}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-devices 5000")
	assert.Contains(t, err.Error(), strconv.Itoa(MaxDevices))
	cfg, err := ParseFlags([]string{"-state-dir", "x", "-devices", strconv.Itoa(MaxDevices)}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, MaxDevices, cfg.Devices)
	// The kernel's MAX_ARG_STRLEN, the terminating NUL included; and the longest state
	// directory, its socket's path filling sun_path's 107 bytes and a NUL.
	const maxArgStrlen = 32 * 4096
	stateDir := "/" + strings.Repeat("d", 107-len("/ublkd.sock")-1)
	raw, err := json.Marshal(daemonConfig(stateDir, MaxDevices))
	require.NoError(t, err)
	env := fakeublk.EnvDaemon + "=" + string(raw)
	assert.Less(t, len(env)+1, maxArgStrlen, "the daemon's environment variable for MaxDevices devices")
	raw, err = json.Marshal(daemonConfig("/var/lib/sandboxd", 3000))
	require.NoError(t, err)
	assert.Greater(t, len(fakeublk.EnvDaemon+"=")+len(raw)+1, maxArgStrlen, "3000 devices do not fit")
}

// A -state-dir too long for the device daemon's socket path (a Unix socket's path holds
// 107 bytes) is bad usage naming the flag: sandboxd took it, locked and filled the
// directory, started the daemon, and exited 1 with "device daemon: fakeublk: daemon not
// ready: EOF" after the daemon's "bind: invalid argument". Without devices there is no
// socket, and any length goes.
func TestStateDirTooLongForTheDaemonsSocketIsNamed(t *testing.T) {
	long := "/" + strings.Repeat("d", 100)
	_, err := ParseFlags([]string{"-state-dir", long}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-state-dir "+long)
	assert.Contains(t, err.Error(), "-devices")
	_, err = ParseFlags([]string{"-state-dir", long, "-devices", "0"}, io.Discard)
	assert.NoError(t, err, "no daemon, no socket")
	fits := "/" + strings.Repeat("d", 107-len("/ublkd.sock")-1)
	_, err = ParseFlags([]string{"-state-dir", fits}, io.Discard)
	assert.NoError(t, err, "the longest that fits")
}

// The teardown steps' reserves are sized from the grace the kubelet uses, as the margin's
// is: kubectl delete --grace-period=30 of a sandboxd whose -grace is an hour gives it the
// reserves of a 30 s sandboxd (the ublk step's 1.5 s, the HTTP step's 750 ms). Before,
// they stayed sized from -grace: the ublk step, critical, kept its 30 s and took all 25 s
// the margin left, so the preserve phase got none: 0 of 8 sandboxes preserved, every one
// lost, and sandboxd exited 29.7 s before SIGKILL, the teardown of its 2 devices done in
// 0.1 s.
func TestTeardownReservesFollowTheGraceADeletionGave(t *testing.T) {
	cfg := testConfig(t)
	cfg.Grace, cfg.Devices = 3600*time.Second, 2
	s, err := New(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer s.Close()
	for range 8 {
		_, err := s.Node().Create(context.Background(), 86400)
		require.NoError(t, err)
	}
	rec := httptest.NewRecorder()
	s.Drainer().PreStop().ServeHTTP(rec, httptest.NewRequest("GET", "/drain?wait=0s", nil)) // T0, then the hook returns
	require.Equal(t, http.StatusOK, rec.Code)
	b := s.Drainer().Budget()
	require.True(t, b.Tighten(b.Start().Add(30*time.Second)), "the deletion's 30 s (kube.Pod reads it)")
	windows := s.Drainer().Plan().Windows(drain.PhasePreserve)
	reserves := map[string]time.Duration{}
	for _, w := range windows {
		reserves[w.Name] = w.Reserve
	}
	assert.Equal(t, 1500*time.Millisecond, reserves["ublk"], "a 30 s grace's ublk reserve")
	assert.Equal(t, 750*time.Millisecond, reserves["http"], "a 30 s grace's HTTP reserve")

	rep := s.Drainer().Shutdown(context.Background())
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 8, rep.Preserve.Counts[pause.Preserved], "preserved of 8 (lost %d, headroom %v)", rep.Lost(), rep.Headroom)
	assert.NoError(t, rep.Err())
}

// Fault: sandboxd exited 0 after a shutdown that lost sandboxes (the Report said so, the
// exit status did not), where drain.Server.Run, gvisor-worker and the supervisor exit 1: a
// kubelet's container status (exitCode, reason Error) and whatever watches it saw a clean
// drain. The exit status is now 1 whenever the Report has an error.
func TestShutdownThatLostSandboxesExits1(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "images"), nil, 0o600)) // every pause fails
	addr := freeAddr(t)
	var stderr logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"-state-dir", dir, "-listen", addr, "-hook-listen", freeAddr(t),
			"-grace", "6s", "-pause-latency", "50ms", "-devices", "1"}, &stderr)
	}()
	base := "http://" + addr
	waitStarted(t, base, &stderr)
	createSandbox(t, base)
	createSandbox(t, base)
	cancel() // as SIGTERM would
	assert.Equal(t, 1, <-code, "%s", &stderr)
	assert.Contains(t, stderr.String(), "lost=2")
	assert.Contains(t, stderr.String(), "2 sandbox(es) not preserved")
}

// Fault: after kubectl delete --force a StatefulSet's new pod of the same name exists
// (uid-new), and sandboxd, given no UID, took the UID its first read of the pod found (at
// the drain) for its own: the new pod's 5 s deletion cut this pod's 30 s, and the Events
// went on the new pod. With -pod-uid (default $POD_UID, the Downward API's metadata.uid)
// the other pod is not this one's: its deletion is not taken, the Events name this pod,
// and this pod, read at start (uid-old) and gone from the API server since, is a force
// deletion's: the kubelet kills it 2 s after SIGTERM (row 580, measured under the real
// kubelet), not after the new pod's 5 s.
func TestSandboxdDoesNotTakeANewPodOfItsNameForItself(t *testing.T) {
	served := fakeapiserver.NewServed(&fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-old"})
	this := served.Pod()
	_, kcfg := fakeapiserver.Start(t, served, this.Namespace, "token-1")
	old := inCluster
	inCluster = func() kube.Config { return kcfg }
	t.Cleanup(func() { inCluster = old })
	cfg := testConfig(t)
	cfg.Grace, cfg.Pod, cfg.PodUID = 30*time.Second, this.Name, this.UID
	st := start(t, cfg)
	createSandbox(t, st.base)
	served.Replace("uid-new").SetDeletion(time.Now().Add(5 * time.Second)) // after the force deletion, the new pod, deleted in its turn
	rep := st.shutdown(t)
	assert.Empty(t, rep.PodMismatch, "read at start, the pod was this one")
	// The pod read that finds the force deletion runs beside the drain; a drain
	// of a few sandboxes may finish before it lands, the budget then as it began.
	// Once it has landed, what did not fit the 2 s is in the Report.
	if kill := rep.Budget.Kill.Sub(rep.Budget.Start); kill != 2*time.Second {
		assert.Equal(t, cfg.Grace, kill, "the grace it began with, or this pod's force deletion; never the other pod's 5 s")
		require.NoError(t, rep.Err())
	}
	require.NotEmpty(t, served.Events())
	for _, ev := range served.Events() {
		assert.Equal(t, this.UID, string(ev.Regarding.UID), "%s names this pod", ev.Reason)
	}
}

// Fault (row 730): a -pod-uid (POD_UID) that is not the pod's was found by no read before
// drain.New, sandboxd reading its pod first at the drain (without -kubelet-config): there
// the other UID under the name was taken for this pod's force deletion, SIGKILL planned
// 2 s after SIGTERM on every drain, nothing said at start. sandboxd now reads its pod at
// start (examples/internal/podstart): the Error line at New, pod_mismatch in the Report
// (Main's exit 1), the grace kept.
func TestSandboxdSaysAPodUIDThatIsNotThePodsAtStart(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"}
	_, kcfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	old := inCluster
	inCluster = func() kube.Config { return kcfg }
	t.Cleanup(func() { inCluster = old })
	cfg := testConfig(t)
	cfg.Grace, cfg.Pod, cfg.PodUID = 30*time.Second, api.Name, "uid-typo"
	var logs logbuf.Buffer
	st := startLogged(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	assert.Contains(t, logs.String(), `level=ERROR msg="drain: a read of the pod found its name not naming this pod`, "said at start")
	assert.Contains(t, logs.String(), "uid-typo")
	createSandbox(t, st.base)
	rep := st.shutdown(t)
	assert.Equal(t, cfg.Grace, rep.Budget.Kill.Sub(rep.Budget.SIGTERM), "the grace kept: no force deletion planned")
	assert.Contains(t, rep.PodMismatch, "uid-typo")
	assert.Error(t, rep.Err())
}

// -kubelet-config reads the node's KubeletConfiguration (the kubelet's --config file,
// mounted from the host): the kubelet's own grace is what it gives this pod's priority, as
// the kubelet computes it, not a number copied into the manifest that drifts from the
// node's. A system-node-critical pod gets shutdownGracePeriodCriticalPods; the drain ends
// by it, and the learned rates record it for drainkit plan.
func TestKubeletConfigGivesTheGraceOfThePodsPriority(t *testing.T) {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "sandboxes", UID: "uid-0"}
	api.SetPriority(2000001000) // system-node-critical
	_, kcfg := fakeapiserver.Start(t, api, api.Namespace, "token-1")
	old := inCluster
	inCluster = func() kube.Config { return kcfg }
	t.Cleanup(func() { inCluster = old })
	cfg := testConfig(t)
	cfg.Grace, cfg.Pod = time.Hour, api.Name
	cfg.KubeletConfig = filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg.KubeletConfig, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
		"shutdownGracePeriod: 45s\nshutdownGracePeriodCriticalPods: 20s\n"), 0o600))
	st := start(t, cfg)
	createSandbox(t, st.base)
	rep := st.shutdown(t) // the pod has no deletionTimestamp: the kubelet's own termination
	require.NoError(t, rep.Err())
	assert.Equal(t, 20*time.Second, rep.Budget.Kill.Sub(rep.Budget.Start), "the critical pods' slice, not -grace's hour")
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, r.KubeletGrace)

	cfg.KubeletGrace = 25 * time.Second
	_, err = New(context.Background(), cfg, nil)
	assert.ErrorContains(t, err, "-kubelet-config and -kubelet-grace are both set")
}

// Fault: sandboxd's API could stop serving on its own (its listener's Accept failing for
// good) and nothing noticed: no line said so, and the node stayed up with no API and no
// readiness, its sandboxes out of every client's reach, until its SIGTERM; then the error
// was logged at WARN and, the Report clean, sandboxd exited 0. As drain.Server.Run does,
// the failure is now logged at ERROR at once and sandboxd drains at once, as at SIGTERM
// (its sandboxes preserved while it still holds them), and Run's error makes Main exit 1.
func TestAPIServingThatStopsDrainsAtOnceAndExitsOne(t *testing.T) {
	var logs logbuf.Buffer
	r := runServer(t, testConfig(t), &logs)
	createSandbox(t, "http://"+r.s.Addr())
	closed := time.Now()
	require.NoError(t, r.s.ln.Close()) // Accept fails for good: serving the API stops

	var res runResult
	select {
	case res = <-r.done:
	case <-time.After(20 * time.Second): // no SIGTERM comes: only serving's end drains
		t.Fatalf("sandboxd still up 20 s after its API stopped serving, not draining:\n%s", logs.String())
	}
	r.done <- res // for the cleanup
	servingtest.DrainedAtOnce(t, res.rep, res.err, logs.String(), closed, "serving the API stopped")
}

// Fault: sandboxd's preStop hook could stop serving on its own and its error was thrown
// away (`_ = s.hook.Serve(...)`): the kubelet's preStop calls failed with no line in
// sandboxd's log saying why, and sandboxd exited 0. As drain.Server.Run does, the failure
// is now logged at ERROR at once; the API goes on serving, readiness too, SIGTERM drains
// as before, and Run's error makes Main exit 1.
func TestHookServingThatStopsIsLoggedAndExitsOne(t *testing.T) {
	var logs logbuf.Buffer
	r := runServer(t, testConfig(t), &logs)
	base := "http://" + r.s.Addr()
	require.NoError(t, r.s.hookLn.Close()) // Accept fails for good: serving the hook stops

	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "level=ERROR msg=\"serving the preStop hook stopped")
	}, 10*time.Second, 10*time.Millisecond, "no line at ERROR said the hook stopped serving")
	createSandbox(t, base) // the API still serves
	code, _, _ := call(t, "GET", base+"/readyz", "")
	assert.Equal(t, http.StatusOK, code, "still ready: no drain before SIGTERM")
	select {
	case res := <-r.done:
		r.done <- res
		t.Fatalf("sandboxd returned before SIGTERM: %v", res.err)
	default:
	}

	res := r.stop()
	require.Error(t, res.err, "Main exits 1")
	assert.Contains(t, res.err.Error(), "serving the preStop hook stopped")
	require.NotNil(t, res.rep.Preserve)
	assert.Equal(t, 1, res.rep.Preserve.Counts[pause.Preserved], "drained at SIGTERM as before")
}

// runResult is what Run returned.
type runResult struct {
	rep *drain.Report
	err error
}

// running is a sandboxd whose Run runs in this process; stop ends it as a signal would.
type running struct {
	s    *Server
	done chan runResult
	stop func() runResult
}

// runServer starts sandboxd with cfg, logging into logs, and runs it until the test's end
// (or stop), whatever Run returns.
func runServer(t *testing.T, cfg Config, logs *logbuf.Buffer) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	r := &running{s: s, done: make(chan runResult, 1)}
	go func() {
		rep, err := s.Run(ctx)
		r.done <- runResult{rep, err}
	}()
	r.stop = func() runResult {
		cancel()
		res := <-r.done
		r.done <- res
		return res
	}
	t.Cleanup(func() { r.stop() })
	return r
}

// Fault: at the drain's end sandboxd saved its learned rates before it wrote its Report
// and the termination message, though the Report matters more (learned.Start.Save says
// so): a Save held up (its fsyncs behind the checkpoints' writeback on a loaded disk,
// here a FIFO in the rates file's place that its read waits on) spent the headroom left
// before SIGKILL, and the Report and the pod's last state were never written. The Report
// and the termination message come first now.
func TestReportIsWrittenBeforeTheLearnedRates(t *testing.T) {
	cfg := testConfig(t)
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	s, err := New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	rates := filepath.Join(cfg.StateDir, learned.File)
	require.NoError(t, syscall.Mkfifo(rates, 0o600)) // learned.Save's read of it waits for a writer
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // as a signal would
	done := make(chan error, 1)
	go func() { _, err := s.Run(ctx); done <- err }()

	report := filepath.Join(cfg.StateDir, ReportFile)
	written := func() bool {
		_, merr := os.Stat(cfg.TerminationLog)
		return lastreporttest.Finished(report) && merr == nil
	}
	wrote := assert.Eventually(t, written, 30*time.Second, 10*time.Millisecond,
		"the Report and the termination message written while the learned rates' save waits")
	w, err := os.OpenFile(rates, os.O_WRONLY, 0) // lets the save go on: its read ends empty
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, <-done)
	require.True(t, wrote)
	_, err = learned.Read(rates)
	assert.NoError(t, err, "the rates saved all the same, over the FIFO")
}

// Fault: sandboxd's exit killed its device daemon with a live device, the kill the ublk
// step had just refused on a kernel where it may crash the host. The daemon is sandboxd's
// child, started with Pdeathsig SIGKILL (and as PID 1 its exit ends the namespace), and
// Close killed it outright when the step had not stopped it: the supervisor holds its exit
// for such a daemon (docs/faults.md rows 405, 406, 436), sandboxd did not. Here a slow
// daemon (4 s before its stop and 4 s before its delete) on a vulnerable kernel:
//
//	0 s      SIGTERM: the drain, no sandbox to pause; the ublk step asks the daemon to stop
//	~5 s     the step's window ends, ublkb0 left live: the Report written, exit status 1
//	         sandboxd says at ERROR that it waits for the daemon, and does not kill it
//	~8 s     the daemon deletes ublkb0 and exits on its own; then sandboxd exits
//
// Before, sandboxd exited at the window's end and its daemon never logged "delete 0" nor
// "exit". In a pod the kubelet's SIGKILL would end the wait at the grace's end.
func TestSandboxdDoesNotExitWhileItsDaemonServesALiveDevice(t *testing.T) {
	dir := t.TempDir()
	p, stderr := startWithADevice(t, dir, freeAddr(t), slowDaemonEnv+"=4s", kernelEnv+"=6.8.0-45-generic")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "sandboxd serving") },
		20*time.Second, 10*time.Millisecond, "sandboxd did not start: %s", stderr)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM), "the kubelet's SIGTERM")

	const waits = "sandboxd: not exiting while the device daemon serves live devices"
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), waits) || p.Exited() },
		20*time.Second, 10*time.Millisecond)
	assert.Contains(t, stderr.String(), waits, "the wait said at ERROR")
	assert.True(t, lastreporttest.Finished(filepath.Join(dir, ReportFile)), "the Report is written before the wait")
	assert.False(t, p.Exited(), "sandboxd waits for its daemon")

	err := p.Wait(t, 30*time.Second, "sandboxd did not exit: %s", stderr)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", stderr)
	assert.Equal(t, 1, exit.ExitCode(), "the ublk step failed all the same: %s", stderr)
	events, err := os.ReadFile(filepath.Join(dir, EventLogFile))
	require.NoError(t, err)
	assert.Contains(t, string(events), "delete 0", "the daemon deleted its device")
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "the daemon exited on its own, not killed by sandboxd's exit: %s", events)

	ur := ublkAccount(t, dir)
	assert.Equal(t, ublk.KernelVulnerable, ur.KernelClass)
	assert.Equal(t, ublk.VerdictLeftLive, ur.Verdict, "the step's window ended with the device live")
	assert.Contains(t, stderr.String(), "sandboxd: the device daemon exited; exiting")
}

// ublkAccount is the ublk step's account (its phase's detail) in the Report sandboxd
// wrote into dir; the test fails without one.
func ublkAccount(t *testing.T, dir string) *ublk.Report {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ReportFile))
	require.NoError(t, err)
	var rep struct {
		Phases []struct {
			Name   string          `json:"name"`
			Detail json.RawMessage `json:"detail"`
		} `json:"phases"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	var ur *ublk.Report
	for _, ph := range rep.Phases {
		if ph.Name == "ublk" {
			require.NoError(t, json.Unmarshal(ph.Detail, &ur))
		}
	}
	require.NotNil(t, ur, "the ublk step's account: %s", data)
	return ur
}

// Fault: a Report write (durable.WriteFile) that the kubelet's SIGKILL cut between its
// create and its rename (during its fsync: a drain that ran to the end of its grace, a
// force deletion's 2 s) left its temporary file in the state directory, a hostPath, and
// no server ever removed it: one more, as large as the Report, for every drain cut there.
// The server that takes the directory removes them, logged; a record's, which Load
// reports for a person to look at, and other files stay.
func TestStartRemovesWhatACutReportWriteLeft(t *testing.T) {
	cfg := testConfig(t)
	cfg.Devices = 0
	cut := filepath.Join(cfg.StateDir, "."+ReportFile+".k2j9x1.tmp") // as a SIGKILL in its fsync leaves it
	require.NoError(t, os.WriteFile(cut, []byte(`{"start": "2026-12-05T00:00:00Z", "phases": [{"na`), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(cfg.StateDir, "records"), 0o700))
	record := filepath.Join(cfg.StateDir, "records", ".sb-1.rec.k2j9x1.tmp")
	require.NoError(t, os.WriteFile(record, []byte("drainkit-record/1 "), 0o600))
	other := filepath.Join(cfg.StateDir, ".notes.tmp")
	require.NoError(t, os.WriteFile(other, nil, 0o600))

	var logs logbuf.Buffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	assert.NoFileExists(t, cut, "removed at start:\n%s", &logs)
	assert.Contains(t, logs.String(), `msg="removed what a write cut short left`)
	assert.Contains(t, logs.String(), cut)
	assert.FileExists(t, record, "a record's: reported, left for a person")
	assert.FileExists(t, other)
}

// Fault: a pause the kubelet's SIGKILL cut (a drain that ran out of grace with pauses in
// flight) left the sandbox's image, which no record names: the record is written only
// once the pause is done. The fake runtime writes its image first; runsc's checkpoint
// leaves a half-written image as large as the sandbox's memory, and the bundles of the
// sandboxes lost running. No sandboxd ever removed them, one more for each on a hostPath
// that outlives every pod (the gVisor worker has swept them at start since row 174).
// sandboxd now removes them at start, logged; a sandbox with a record, or with
// a damaged one NewNode skipped, keeps its image. A real server SIGKILLed in a pause.
func TestStartRemovesWhatAPauseCutBySIGKILLLeft(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	cmd := exec.Command(os.Args[0], "-listen", addr, "-hook-listen", freeAddr(t), "-state-dir", dir, "-grace", "30s",
		"-pause-latency", "10s", "-devices", "0")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	p := pid1test.Start(t, cmd)
	base := "http://" + addr
	waitStarted(t, base, &stderr)
	id := createSandbox(t, base)
	go func() { // answered never: the server is killed in the pause
		if resp, err := http.Post(base+"/sandboxes/"+id+"/pause", "", nil); err == nil {
			resp.Body.Close()
		}
	}()
	cut := filepath.Join(dir, "images", id+".img")
	require.Eventually(t, func() bool { _, err := os.Stat(cut); return err == nil }, 20*time.Second, 5*time.Millisecond,
		"the pause did not write its image: %s", &stderr)
	require.NoError(t, cmd.Process.Kill()) // the kubelet's SIGKILL, in the pause
	_ = p.Wait(t, 30*time.Second, "sandboxd SIGKILLed did not exit")

	kept, torn := filepath.Join(dir, "images", "sb-kept.img"), filepath.Join(dir, "images", "sb-torn.img")
	writeRecord(t, dir, store.Record{ID: "sb-kept", State: "paused", Runtime: "fake", Image: kept, TimeoutS: 60, PausedAt: time.Now()})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "records", "sb-torn.rec"), []byte("dra"), 0o600))
	for _, img := range []string{kept, torn} {
		require.NoError(t, os.WriteFile(img, []byte(`{}`), 0o600))
	}

	cfg := testConfig(t)
	cfg.StateDir, cfg.Devices = dir, 0
	var logs logbuf.Buffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	defer s.Close()
	assert.NoFileExists(t, cut, "removed at start:\n%s", &logs)
	assert.Contains(t, logs.String(), "removed what a sandbox without a record left")
	assert.FileExists(t, kept, "a paused sandbox's")
	assert.FileExists(t, torn, "a damaged record's: reported, left for a person")
}
