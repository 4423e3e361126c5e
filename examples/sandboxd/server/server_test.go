package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/pause"
)

// started is a sandboxd running in this process on a loopback port.
type started struct {
	s    *Server
	base string
	hook string // the preStop hook's base URL
	stop context.CancelFunc
	done chan *drain.Report
}

func start(t *testing.T, cfg Config) *started { return startLogged(t, cfg, nil) }

// startLogged is start with the server's log going to logger.
func startLogged(t *testing.T, cfg Config, logger *slog.Logger) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg, logger)
	require.NoError(t, err)
	st := &started{s: s, base: "http://" + s.Addr(), hook: "http://" + s.HookAddr(), stop: cancel, done: make(chan *drain.Report, 1)}
	go func() {
		rep, err := s.Run(ctx)
		assert.NoError(t, err)
		st.done <- rep
	}()
	t.Cleanup(func() { cancel(); <-st.done })
	return st
}

// shutdown ends the server as a signal would and returns its Report.
func (st *started) shutdown(t *testing.T) *drain.Report {
	st.stop()
	rep := <-st.done
	st.done <- rep // for the cleanup
	return rep
}

func testConfig(t *testing.T) Config {
	return Config{Listen: "127.0.0.1:0", HookListen: "127.0.0.1:0", StateDir: t.TempDir(), Grace: 6 * time.Second, Runtime: "fake",
		PauseLatency: 50 * time.Millisecond, Concurrency: 4, Devices: 1}
}

func call(t *testing.T, method, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(bytes.TrimSpace(data))
}

func createSandbox(t *testing.T, base string) string {
	t.Helper()
	code, _, body := call(t, "POST", base+"/sandboxes", `{"timeout_s": 86400}`)
	require.Equal(t, http.StatusCreated, code, body)
	var v map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	require.Len(t, v, 2, "exactly id and state: %s", body)
	require.Equal(t, "running", v["state"])
	return v["id"]
}

func TestHTTPContract(t *testing.T) {
	st := start(t, testConfig(t))
	a := createSandbox(t, st.base)
	b := createSandbox(t, st.base)

	code, _, body := call(t, "GET", st.base+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code)
	var list []map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	assert.ElementsMatch(t, []map[string]string{{"id": a, "state": "running"}, {"id": b, "state": "running"}}, list)

	code, _, body = call(t, "POST", st.base+"/sandboxes/"+a+"/pause", "")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"id":"`+a+`","state":"paused"}`, body)
	code, _, _ = call(t, "POST", st.base+"/sandboxes/"+a+"/pause", "")
	assert.Equal(t, http.StatusConflict, code, "pausing a paused sandbox")
	code, _, body = call(t, "POST", st.base+"/sandboxes/"+a+"/resume", "")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"id":"`+a+`","state":"running"}`, body)
	code, _, _ = call(t, "DELETE", st.base+"/sandboxes/"+b, "")
	assert.Equal(t, http.StatusNoContent, code)
	code, _, _ = call(t, "DELETE", st.base+"/sandboxes/"+b, "")
	assert.Equal(t, http.StatusNotFound, code)
	code, _, _ = call(t, "POST", st.base+"/sandboxes/nope/resume", "")
	assert.Equal(t, http.StatusNotFound, code)
	for _, bad := range []string{``, `{}`, `{"timeout_s": 0}`, `{"timeout_s": 5, "x": 1}`} {
		code, _, _ = call(t, "POST", st.base+"/sandboxes", bad)
		assert.Equal(t, http.StatusBadRequest, code, "body %q", bad)
	}
	code, _, _ = call(t, "GET", st.base+"/healthz", "")
	assert.Equal(t, http.StatusOK, code)
	code, _, _ = call(t, "GET", st.base+"/readyz", "")
	assert.Equal(t, http.StatusOK, code)

	// The preStop call closes the gate: readiness and creates turn 503, liveness stays,
	// pause (exempt) still works. ?wait=10ms answers at once while the wait goes on.
	code, _, body = call(t, "GET", st.hook+"/drain?wait=10ms", "")
	require.Equal(t, http.StatusOK, code)
	var sum drain.PreStopSummary
	require.NoError(t, json.Unmarshal([]byte(body), &sum))
	assert.Equal(t, 1, sum.Running)
	code, _, _ = call(t, "GET", st.base+"/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	code, hdr, _ := call(t, "POST", st.base+"/sandboxes", `{"timeout_s": 60}`)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.NotEmpty(t, hdr.Get("Retry-After"))
	code, _, _ = call(t, "POST", st.base+"/sandboxes/"+a+"/resume", "")
	assert.Equal(t, http.StatusServiceUnavailable, code, "resume is gated")
	code, _, _ = call(t, "GET", st.base+"/healthz", "")
	assert.Equal(t, http.StatusOK, code)
	code, _, _ = call(t, "POST", st.base+"/sandboxes/"+a+"/pause", "")
	assert.Equal(t, http.StatusOK, code, "pause is exempt from the gate")

	// With nothing running the preStop wait ends: drained.
	code, _, body = call(t, "GET", st.hook+"/drain", "")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal([]byte(body), &sum))
	assert.Equal(t, "drained", sum.Reason)
}

func TestShutdownPreservesWritesReportAndRestartLoadsPaused(t *testing.T) {
	cfg := testConfig(t)
	st := start(t, cfg)
	var ids []string
	for range 6 {
		ids = append(ids, createSandbox(t, st.base))
	}
	rep := st.shutdown(t)
	require.NoError(t, rep.Err())
	assert.Equal(t, 6, rep.Preserve.Counts[pause.Preserved])
	assert.Equal(t, drain.OK, rep.Phase("ublk").Result, "the device daemon stopped cleanly")
	assert.Positive(t, rep.Headroom)

	data, err := os.ReadFile(filepath.Join(cfg.StateDir, ReportFile))
	require.NoError(t, err)
	var onDisk drain.Report
	require.NoError(t, json.Unmarshal(data, &onDisk))
	assert.Equal(t, 6, onDisk.Preserve.Counts[pause.Preserved])
	events, err := os.ReadFile(filepath.Join(cfg.StateDir, EventLogFile))
	require.NoError(t, err)
	assert.Contains(t, string(events), "request shutdown\n")
	assert.True(t, strings.HasSuffix(string(events), "exit\n"), "daemon exited on its own: %s", events)

	// Tear one record as a crash mid-write would; the next process reports it and loads
	// the other five as paused, resumable.
	torn := filepath.Join(cfg.StateDir, "records", ids[0]+".rec")
	data, err = os.ReadFile(torn)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(torn, data[:len(data)-7], 0o600))

	next := start(t, cfg)
	require.Len(t, next.s.Problems, 1)
	assert.Equal(t, torn, next.s.Problems[0].Path)
	code, _, body := call(t, "GET", next.base+"/sandboxes", "")
	require.Equal(t, http.StatusOK, code)
	var list []map[string]string
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list, 5)
	for _, v := range list {
		assert.Equal(t, "paused", v["state"])
		assert.NotEqual(t, ids[0], v["id"])
	}
	code, _, body = call(t, "POST", next.base+"/sandboxes/"+ids[1]+"/resume", "")
	assert.Equal(t, http.StatusOK, code, body)
}

func TestBadConfigurationFailsNamingTheFlag(t *testing.T) {
	for flagName, args := range map[string][]string{
		"-state-dir":     {},
		"-grace":         {"-state-dir", "x", "-grace", "1s"},
		"-runtime":       {"-state-dir", "x", "-runtime", "docker"},
		"-concurrency":   {"-state-dir", "x", "-concurrency", "-1"},
		"-pause-jitter":  {"-state-dir", "x", "-pause-jitter", "1.5"},
		"-devices":       {"-state-dir", "x", "-devices", "-2"},
		"-kubelet-grace": {"-state-dir", "x", "-kubelet-grace", "-5s"},
	} {
		_, err := ParseFlags(args, io.Discard)
		require.Error(t, err, flagName)
		assert.Contains(t, err.Error(), flagName)
	}
	cfg, err := ParseFlags([]string{"-state-dir", "/s", "-grace", "3600", "-concurrency", "8"}, io.Discard) // the manifest's seconds as they are (row 376)
	require.NoError(t, err)
	assert.Equal(t, Config{Listen: DefaultListen, HookListen: DefaultHookListen, StateDir: "/s", Grace: time.Hour, Runtime: "fake",
		PauseLatency: DefaultPauseLatency, Concurrency: 8, Devices: DefaultDevices}, cfg)

	_, err = New(context.Background(), Config{Listen: "256.0.0.1:1", HookListen: "127.0.0.1:0", StateDir: t.TempDir(), Grace: 10 * time.Second,
		Runtime: "fake", Concurrency: 1}, nil)
	require.ErrorContains(t, err, "-listen")
}

// What one shutdown measured is where the next process starts: the estimate of a pause
// (the fake runtime's 50 ms, not the 1 s configured next time), the concurrency, the
// budget and the steps' reserves, in STATE_DIR/learned-rates.json.
func TestLearnedRatesSurviveARestart(t *testing.T) {
	cfg := testConfig(t)
	st := start(t, cfg)
	for range 8 {
		createSandbox(t, st.base)
	}
	rep := st.shutdown(t)
	require.Zero(t, rep.Lost())

	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 8, r.Observations)
	assert.GreaterOrEqual(t, r.Estimate, 50*time.Millisecond, "a pause takes at least the fake latency")
	assert.Less(t, r.Estimate, time.Second)
	assert.Equal(t, 4, r.Limit)
	assert.Equal(t, cfg.Grace, r.Grace)
	require.Len(t, r.Steps, 2)
	assert.Equal(t, "ublk", r.Steps[0].Name)
	assert.True(t, r.Steps[0].Critical, "the device teardown is critical")
	assert.Equal(t, cfg.UblkReserve(), r.Steps[0].Reserve)
	assert.Equal(t, "http", r.Steps[1].Name)
	assert.Equal(t, cfg.HTTPReserve(), r.Steps[1].Reserve)

	cfg.PauseLatency = time.Second // what the next start is configured with
	st = start(t, cfg)
	assert.Equal(t, r.Estimate, st.s.est.Estimate(), "the next process starts from what was learned")
	st.shutdown(t)

	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, learned.File), []byte("{"), 0o600))
	st = start(t, cfg)
	assert.Equal(t, cfg.PauseEstimate(), st.s.est.Estimate(), "an unreadable file falls back to -pause-latency")
}

// The device teardown runs ublk's last resort by default: on a kernel not
// known fixed, VMMs of this pod still holding a disk at the last-resort
// point are killed so the daemon stops its devices and exits before
// SIGKILL; its part of the reserve is in the plan.
func TestUblkStepRunsTheLastResortByDefault(t *testing.T) {
	s, err := New(context.Background(), testConfig(t), nil)
	require.NoError(t, err)
	defer s.Close()
	require.NotNil(t, s.ublk, "-devices 1: a ublk step")
	assert.True(t, s.ublk.LastResort())
	assert.Equal(t, s.cfg.UblkReserve(), s.ublk.Phase().Reserve(), "the step's reserve, the last resort's part included")
	assert.Contains(t, s.drainer.Plan().Phases(), "ublk", "the ublk teardown step")
}

// At exit the drain's summary goes to the termination message path, where the kubelet
// reads it into the pod's last state: the verdict first, within 4 KiB.
func TestTerminationMessageSummarisesTheDrain(t *testing.T) {
	cfg := testConfig(t)
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	st := start(t, cfg)
	for range 5 {
		createSandbox(t, st.base)
	}
	rep := st.shutdown(t)
	require.Zero(t, rep.Lost())
	msg, err := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(msg), termmsg.MaxBytes)
	assert.Regexp(t, `^drainkit: all 5 sandboxes preserved; exited \d+\.\d{3}s before SIGKILL\n`, string(msg))
	assert.Contains(t, string(msg), "sandboxes: 5: preserved 5\n")
	assert.Contains(t, string(msg), "phases: gate ok ")
	assert.Contains(t, string(msg), "full report: "+filepath.Join(cfg.StateDir, ReportFile))
}

// GET /metrics exposes the OpenTelemetry metrics in Prometheus's text format: once the
// preStop wait has counted the running sandboxes and the gate refused a create, both show.
func TestMetricsInPrometheusFormat(t *testing.T) {
	st := start(t, testConfig(t))
	for range 3 {
		createSandbox(t, st.base)
	}
	code, _, body := call(t, "GET", st.hook+"/drain?wait=0s", "")
	require.Equal(t, http.StatusOK, code, body)
	code, _, _ = call(t, "POST", st.base+"/sandboxes", `{"timeout_s": 60}`)
	require.Equal(t, http.StatusServiceUnavailable, code)
	code, hdr, body := call(t, "GET", st.base+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, hdr.Get("Content-Type"), "text/plain")
	t.Logf("metrics:\n%s", body)
	assert.Regexp(t, `(?m)^drainkit_drain_sandboxes_running(\{[^}]*\})? 3$`, body)
	assert.Regexp(t, `(?m)^drainkit_drain_gate_rejections_total\{[^}]*class="create"[^}]*\} 1$`, body)
	st.shutdown(t)

	// After the drain (the API is closed by now; the handler still answers): every phase,
	// every pause and the device teardown.
	rec := httptest.NewRecorder()
	st.s.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	after := rec.Body.String()
	t.Logf("metrics after the drain:\n%s", after)
	for _, want := range []string{
		`drainkit_drain_phase_duration_seconds_count{drainkit_drain_phase="preserve",drainkit_drain_result="ok"} 1`,
		`drainkit_drain_phase_duration_seconds_count{drainkit_drain_phase="ublk",drainkit_drain_result="ok"} 1`,
		`drainkit_pause_sandboxes_total{drainkit_pause_outcome="preserved"} 3`,
		`drainkit_drain_outcomes_total{drainkit_drain_outcome="preserved"} 3`,
		`drainkit_ublk_devices_total{drainkit_ublk_verdict="stopped"} 1`,
		`drainkit_pause_preserve_duration_seconds_count`,
		`drainkit_ublk_teardown_duration_seconds_count`,
		`drainkit_drain_headroom_seconds `,
	} {
		assert.Contains(t, after, want)
	}
}

// A learned estimate is a prior, never a reason not to start: one whose round no longer
// fits the grace period (the last shutdown's pauses took most of a window, or the grace
// was shortened since) made New fail, and since the file is rewritten only at a shutdown,
// sandboxd never started again, serving none of its checkpointed sandboxes, until the
// file was removed by hand. It now starts from -pause-latency and says why.
func TestLearnedEstimateThatNoLongerFitsDoesNotStopTheStart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Grace = 30 * time.Second
	r := learned.Rates{Written: time.Now(), Estimate: 26 * time.Second, Mean: 25 * time.Second, P90: 26 * time.Second,
		Observations: 8, Limit: 4, Grace: cfg.Grace}
	require.NoError(t, r.Write(filepath.Join(cfg.StateDir, learned.File)))
	var logs logbuf.Buffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err, "the learned estimate must not keep sandboxd from starting")
	defer s.Close()
	assert.Equal(t, cfg.PauseEstimate(), s.est.Estimate(), "started from -pause-latency")
	assert.Contains(t, logs.String(), "learned estimate does not fit")
	assert.Contains(t, logs.String(), "estimate=26s")
}

// A -grace the flag check accepts (the kubelet's 2 s minimum) but too short for one round
// of pauses and the steps' reserves is bad usage naming -grace and -pause-latency: sandboxd
// exited 1 blaming drain's Config.Steps, a field no flag sets.
func TestGraceTooShortForThePlanNamesTheFlags(t *testing.T) {
	var stderr logbuf.Buffer
	code := Main(context.Background(), []string{"-state-dir", t.TempDir(), "-listen", "127.0.0.1:0",
		"-hook-listen", "127.0.0.1:0", "-grace", "2s"}, &stderr)
	assert.Equal(t, 2, code, "bad usage: %s", &stderr)
	assert.Contains(t, stderr.String(), "-grace 2s")
	assert.Contains(t, stderr.String(), "-pause-latency")
}

// With -concurrency 0 the limit adapts, and what its Run measured best is kept for the
// next process (learned_limit); a shutdown that learns none (a fixed -concurrency) keeps
// the one learned before it, so one short or fixed drain does not throw away what the
// node measured.
func TestLearnedConcurrencySurvivesARestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Concurrency = 0
	st := start(t, cfg)
	for range 40 {
		createSandbox(t, st.base)
	}
	rep := st.shutdown(t)
	require.Zero(t, rep.Lost())
	require.NotNil(t, rep.Preserve)
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	require.Positive(t, rep.Preserve.LearnedLimit, "40 pauses compare two limits at least")
	assert.Equal(t, rep.Preserve.LearnedLimit, r.LearnedLimit)
	assert.Equal(t, rep.Preserve.Limit, r.Limit)
	assert.Equal(t, MaxConcurrency, r.MaxLimit, "adaptive: the ceiling, for drainkit plan")

	cfg.Concurrency = 4
	var logs logbuf.Buffer
	st = startLogged(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	for range 4 {
		createSandbox(t, st.base)
	}
	require.Zero(t, st.shutdown(t).Lost())
	assert.Contains(t, logs.String(), fmt.Sprintf("learned_concurrency=%d", r.LearnedLimit), "loaded at start")
	again, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 4, again.Limit)
	assert.Zero(t, again.MaxLimit, "a fixed limit")
	assert.Equal(t, r.LearnedLimit, again.LearnedLimit, "a fixed limit learns none: the last one is kept")
}

// What was learned never keeps sandboxd from starting: a learned concurrency above the
// ceiling (a file from a build with a higher one, a hand edit) is capped, and one whose
// estimate no longer fits the grace is set aside with the estimate.
func TestLearnedConcurrencyThatNoLongerFitsDoesNotStopTheStart(t *testing.T) {
	for name, tc := range map[string]struct {
		r        learned.Rates
		setAside bool
	}{
		"above the ceiling":  {learned.Rates{Estimate: 60 * time.Millisecond, LearnedLimit: 1000, LearnedEstimate: 60 * time.Millisecond}, false},
		"estimate too large": {learned.Rates{Estimate: 26 * time.Second, LearnedLimit: 16, LearnedEstimate: 26 * time.Second}, true},
	} {
		r := tc.r
		cfg := testConfig(t)
		cfg.Concurrency, cfg.Grace = 0, 30*time.Second
		r.Written = time.Now()
		require.NoError(t, r.Write(filepath.Join(cfg.StateDir, learned.File)))
		var logs logbuf.Buffer
		s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		require.NoError(t, err, name)
		s.Close()
		if tc.setAside {
			assert.Contains(t, logs.String(), "learned estimate does not fit", name)
		} else {
			assert.NotContains(t, logs.String(), "does not fit", "%s: capped at %d, not set aside", name, MaxConcurrency)
		}
	}
}

// A drain at a fixed -concurrency measures its pauses at that limit, not at the level an
// adaptive drain learned, so it must not hand that level on with its own estimate: the
// next adaptive start checks the level against the estimate it was learned with (at the
// knee), and one measured at 4 at once (faster each) would make a first epoch at 8 look
// past the knee, one measured at 32 would make it look on pace. The fixed drain wrote its
// own estimate beside the old level, and the next adaptive start took it.
func TestFixedDrainKeepsTheEstimateTheLevelWasLearnedWith(t *testing.T) {
	cfg := testConfig(t) // fixed at 4, pauses of 50 ms
	knee := learned.Rates{Written: time.Now(), Estimate: 300 * time.Millisecond, Mean: 280 * time.Millisecond,
		P90: 300 * time.Millisecond, Observations: 40, Limit: 16, LearnedLimit: 16, MaxLimit: MaxConcurrency, Grace: cfg.Grace}
	require.NoError(t, knee.Write(filepath.Join(cfg.StateDir, learned.File)))
	st := start(t, cfg)
	for range 4 {
		createSandbox(t, st.base)
	}
	require.Zero(t, st.shutdown(t).Lost())
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Less(t, r.Estimate, knee.Estimate, "the fixed drain's own estimate, for drainkit plan")
	assert.Equal(t, 16, r.LearnedLimit, "a fixed limit learns none: the last one is kept")
	assert.Equal(t, knee.Estimate, r.LearnedEstimate, "with the estimate it was learned with")

	cfg.Concurrency = 0
	st = start(t, cfg)
	assert.Equal(t, knee.Estimate, st.s.est.Estimate(), "the adaptive start checks the learned level against the estimate it was learned with")
	st.shutdown(t)
}

// drainkit plan predicts the next drain from the rates file, and the next drain is the
// running server's: a server whose limit adapts records so at start (max_limit) when the
// file says otherwise, as one written by a fixed -concurrency or before max_limit existed
// (only limit) does. Until the server's next shutdown rewrote the file, plan planned an
// adaptive sandboxd as fixed at the file's limit: after an upgrade to the adaptive
// default, or a change of -concurrency.
func TestStartRecordsWhetherTheLimitAdapts(t *testing.T) {
	cfg := testConfig(t)
	cfg.Concurrency = 0
	old := learned.Rates{Written: time.Now(), Estimate: 50 * time.Millisecond, Observations: 8, Limit: 4, Grace: cfg.Grace}
	require.NoError(t, old.Write(filepath.Join(cfg.StateDir, learned.File)))
	st := start(t, cfg)
	r, err := learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, MaxConcurrency, r.MaxLimit, "adaptive: the ceiling, for drainkit plan, before any shutdown")
	assert.Equal(t, old.Estimate, r.Estimate, "what was learned is kept")
	st.shutdown(t)

	cfg.Concurrency = 3
	st = start(t, cfg)
	r, err = learned.Read(filepath.Join(cfg.StateDir, learned.File))
	require.NoError(t, err)
	assert.Zero(t, r.MaxLimit, "fixed")
	assert.Equal(t, 3, r.Limit, "at -concurrency")
	st.shutdown(t)
}
