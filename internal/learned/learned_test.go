package learned_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "helper:server" {
		os.Exit(serverHelper(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

func TestRatesRoundTripThroughTheFile(t *testing.T) {
	e := deadline.NewEstimator(time.Second)
	for _, d := range []time.Duration{100, 200, 300, 400} {
		e.Observe(d * time.Millisecond)
	}
	r := learned.Rates{Written: time.Unix(1700000000, 0).UTC(), Limit: 4, LearnedLimit: 16, MaxLimit: 32, Grace: 30 * time.Second, Margin: 3 * time.Second,
		Steps: learned.StepsOf(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(1500 * time.Millisecond), Critical: true},
			deadline.Phase{Name: "http"})}
	r.FromEstimator(e)
	assert.Equal(t, 4, r.Observations)
	assert.Equal(t, 400*time.Millisecond, r.P90)
	assert.Equal(t, e.Estimate(), r.Estimate)
	path := filepath.Join(t.TempDir(), learned.File)
	require.NoError(t, r.Write(path))
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, r, *got)
	ph := got.Phases()
	require.Len(t, ph, 2)
	assert.True(t, ph[0].Critical)
	assert.Equal(t, 1500*time.Millisecond, ph[0].Reserve())
	assert.Zero(t, ph[1].Reserve())
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
}

func TestReadSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	_, err := learned.Read(filepath.Join(dir, "none.json"))
	assert.ErrorIs(t, err, learned.ErrNone)
	for body, says := range map[string]string{
		`{`: "unexpected end of JSON input: not readable as learned rates (cut short by a crash or a full disk?): remove it",
		// A Report given for the rates: it decoded to empty rates, and
		// drainkit plan planned with the defaults, exit 0.
		`{"start": "2026-12-01T09:09:07Z", "phases": [], "headroom_ns": 1}`: `no rates in it (no written, estimate_ns, limit, grace_ns or steps): not a learned-rates.json a server wrote`,
		`{"estimate_ns": -1}`:                        "estimate_ns is negative",
		`{"limit": -2}`:                              "limit is negative",
		`{"learned_limit": -2}`:                      "learned_limit is negative",
		`{"learned_estimate_ns": -2}`:                "learned_estimate_ns is negative",
		`{"max_limit": -32}`:                         "max_limit is negative",
		`{"grace_ns": -5}`:                           "grace_ns, margin_ns and kubelet_grace_ns must not be negative",
		`{"mean_ns": -3}`:                            "mean_ns is negative",
		`{"p90_ns": -4}`:                             "p90_ns is negative",
		`{"observations": -1}`:                       "observations is negative",
		`{"steps": [{"name": "", "reserve_ns": 1}]}`: "steps[0] needs a name",
	} {
		f := filepath.Join(dir, "r.json")
		require.NoError(t, os.WriteFile(f, []byte(body), 0o600))
		_, err := learned.Read(f)
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), says, body)
		assert.Contains(t, err.Error(), f, "names the file")
	}
}

// A file written before learned_limit existed has only limit, the
// concurrency at the end of the shutdown: it loads, with no learned limit
// (a server starts its limit cold), and limit keeps its meaning for
// drainkit plan. A negative learned_limit is refused, naming the field.
func TestOldFileWithOnlyLimitLoadsWithNoLearnedLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), learned.File)
	require.NoError(t, os.WriteFile(path, []byte(`{"written": "2026-11-30T10:00:00Z", "estimate_ns": 2000000000, "limit": 24}`), 0o600))
	r, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 24, r.Limit)
	assert.Zero(t, r.LearnedLimit)
	assert.Zero(t, r.MaxLimit, "planned as a fixed limit, as before")
	assert.Equal(t, 2*time.Second, r.Estimate)

	require.NoError(t, os.WriteFile(path, []byte(`{"limit": 24, "learned_limit": -4}`), 0o600))
	_, err = learned.Read(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "learned_limit is negative")
	assert.Contains(t, err.Error(), path)
}

// FromReport keeps what the shutdown's Preserver learned, with the
// shutdown's estimate, or, when it learned nothing (a fixed limit, a drain
// too short to compare two limits, no Preserver at all), what the shutdown
// before it learned, with the estimate that level was learned with.
func TestFromReportKeepsTheLastLearnedLimit(t *testing.T) {
	prev := &learned.Rates{LearnedLimit: 16, LearnedEstimate: 2 * time.Second, Limit: 20}
	for _, tc := range []struct {
		name         string
		rep          *pause.Report
		prev         *learned.Rates
		limit, learn int
		estimate     time.Duration
	}{
		{"learned", &pause.Report{Limit: 40, LearnedLimit: 32}, prev, 40, 32, time.Second},
		{"learned none", &pause.Report{Limit: 8}, prev, 8, 16, 2 * time.Second},
		{"no preserver", nil, prev, 4, 16, 2 * time.Second},
		{"nothing before", &pause.Report{Limit: 8}, nil, 8, 0, 0},
	} {
		r := learned.Rates{Limit: 4, Estimate: time.Second}
		r.FromReport(tc.rep, tc.prev)
		assert.Equal(t, tc.limit, r.Limit, tc.name)
		assert.Equal(t, tc.learn, r.LearnedLimit, tc.name)
		assert.Equal(t, tc.estimate, r.LearnedEstimate, tc.name)
	}
}

// The estimate a learned level is checked against is the one it was
// learned with. A file written before learned_estimate_ns has it only when
// its writer adapted (max_limit): then its estimate is an adaptive
// drain's; a fixed writer's was measured at its fixed limit, and its level
// is set aside.
func TestLevelComesWithTheEstimateItWasLearnedWith(t *testing.T) {
	for _, tc := range []struct {
		name     string
		r        learned.Rates
		level    int
		estimate time.Duration
	}{
		{"kept with its estimate", learned.Rates{Estimate: time.Second, LearnedLimit: 16, LearnedEstimate: 3 * time.Second}, 16, 3 * time.Second},
		{"before the field, adaptive writer", learned.Rates{Estimate: time.Second, LearnedLimit: 16, MaxLimit: 32}, 16, time.Second},
		{"before the field, fixed writer", learned.Rates{Estimate: time.Second, LearnedLimit: 16, Limit: 4}, 0, 0},
		{"none learned", learned.Rates{Estimate: time.Second, MaxLimit: 32}, 0, 0},
	} {
		level, est := tc.r.Level()
		assert.Equal(t, tc.level, level, tc.name)
		assert.Equal(t, tc.estimate, est, tc.name)
	}
}

// A Server's start: from what was learned when a file is there and valid
// (the learned level capped at the ceiling, only when the limit adapts),
// cold otherwise (the Estimator from Prior, the limit from 8 or fixed),
// and never an error.
func TestServerStartsFromWhatWasLearnedOrCold(t *testing.T) {
	dir := t.TempDir()
	r := learned.Rates{Estimate: 2 * time.Second, Observations: 40, LearnedLimit: 64, MaxLimit: 64}
	require.NoError(t, r.Write(filepath.Join(dir, learned.File)))
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, learned.File), []byte("{"), 0o600))
	for _, tc := range []struct {
		name            string
		srv             learned.Server
		limit, maxLimit int
		estimate        time.Duration
	}{
		{"adaptive, learned level capped", learned.Server{Dir: dir, Ceiling: 32, Prior: time.Second}, 32, 32, 2 * time.Second},
		{"fixed: the estimate only", learned.Server{Dir: dir, Concurrency: 4, Prior: time.Second}, 4, 0, 2 * time.Second},
		{"no directory", learned.Server{Prior: 300 * time.Millisecond}, 0, 32, 300 * time.Millisecond},
		{"no file", learned.Server{Dir: t.TempDir(), Concurrency: 4}, 4, 0, time.Second},
		{"unreadable file", learned.Server{Dir: bad, Ceiling: 16, Prior: time.Second}, 0, 16, time.Second},
	} {
		st := tc.srv.Start()
		cfg := st.Config()
		st.Close()
		assert.Equal(t, tc.limit, cfg.Limit, tc.name)
		assert.Equal(t, tc.maxLimit, cfg.MaxLimit, tc.name)
		assert.Equal(t, tc.estimate, cfg.Estimator.Estimate(), tc.name)
		_, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }), cfg)
		assert.NoError(t, err, "%s: a Config pause takes", tc.name)
	}
}

// What was learned is set aside when its Config does not fit (Cold), and
// only then: a start that used nothing learned has nothing to set aside,
// and the error is the server's configuration's.
func TestColdSetsWhatWasLearnedAside(t *testing.T) {
	dir := t.TempDir()
	r := learned.Rates{Estimate: 26 * time.Second, LearnedLimit: 16, MaxLimit: 32}
	require.NoError(t, r.Write(filepath.Join(dir, learned.File)))
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Prior: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	assert.Equal(t, 16, st.Config().Limit)
	cold, ok := st.Cold(errors.New("does not fit"))
	require.True(t, ok)
	assert.Zero(t, cold.Limit, "adaptive from 8")
	assert.Equal(t, time.Second, cold.Estimator.Estimate())
	assert.Contains(t, logs.String(), "learned estimate does not fit the grace period")
	assert.Contains(t, logs.String(), "estimate=26s")
	_, ok = st.Cold(errors.New("again"))
	assert.False(t, ok, "already cold")

	_, ok = learned.Server{Dir: t.TempDir()}.Start().Cold(errors.New("the flags"))
	assert.False(t, ok, "nothing learned to set aside")
}

// Save writes what the shutdown learned, keeping the last shutdown's
// learned level when this one learned none; without a Dir it writes
// nothing.
func TestSaveKeepsTheLastLearnedLevel(t *testing.T) {
	dir := t.TempDir()
	r := learned.Rates{Estimate: 2 * time.Second, LearnedLimit: 16, MaxLimit: 32}
	require.NoError(t, r.Write(filepath.Join(dir, learned.File)))
	budget, err := deadline.New(30*time.Second, deadline.Config{})
	require.NoError(t, err)
	st := learned.Server{Dir: dir}.Start()
	cfg := st.Config()
	cfg.Estimator.Observe(time.Second)
	step := drain.NewStep(deadline.Phase{Name: "http", Reserve: deadline.Fixed(time.Second)}, func(context.Context) (any, error) { return nil, nil })
	st.Save(&drain.Report{Preserve: &pause.Report{Limit: 8}}, budget, []drain.Step{step})
	got, err := learned.Read(filepath.Join(dir, learned.File))
	require.NoError(t, err)
	assert.Equal(t, 16, got.LearnedLimit, "this drain learned none")
	assert.Equal(t, 8, got.Limit)
	assert.Equal(t, 32, got.MaxLimit)
	assert.Equal(t, 1, got.Observations)
	assert.Equal(t, 30*time.Second, got.Grace)
	assert.Equal(t, []learned.Step{{Name: "http", Reserve: time.Second}}, got.Steps)

	none := learned.Server{}.Start()
	none.Config()
	none.Save(nil, budget, nil) // nowhere to write: nothing happens
}

// A server started with another grace than the last shutdown's records
// its own at start, as it does its limit: drainkit plan read the file's
// and said "grace 8s (the server's) ... FITS" of a server restarted with
// 5 s, whose drain then lost 12 of 40 (an operator's review). What was
// learned stays; a start with the file's grace leaves it alone.
func TestStartRecordsTheServersGrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	file := learned.Rates{Written: time.Date(2026, 12, 1, 9, 21, 27, 0, time.UTC), Estimate: 400 * time.Millisecond, Observations: 40,
		Limit: 4, Grace: 8 * time.Second, Margin: 1500 * time.Millisecond}
	require.NoError(t, file.Write(path))
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	start := learned.Server{Dir: dir, Concurrency: 4, Budget: budget}.Start()
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 60*time.Second, got.Grace, "this server's grace")
	assert.Equal(t, budget.Margin(), got.Margin)
	assert.Equal(t, 400*time.Millisecond, got.Estimate, "what was learned stays")
	assert.Equal(t, 40, got.Observations)
	start.Close()

	info, err := os.Stat(path)
	require.NoError(t, err)
	learned.Server{Dir: dir, Concurrency: 4, Budget: budget}.Start().Close()
	again, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, info.ModTime(), again.ModTime(), "the same grace: not rewritten")
}

// The kubelet grace a server's drain uses for the kubelet's own
// terminations (graceful node shutdown) is recorded as its grace is, at
// start when the file has another and at the shutdown's Save, so that
// drainkit plan plans those terminations too.
func TestTheServersKubeletGraceIsRecorded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	file := learned.Rates{Written: time.Date(2026, 12, 1, 9, 21, 27, 0, time.UTC), Estimate: 400 * time.Millisecond, Observations: 40,
		Limit: 4, Grace: budget.Grace(), Margin: budget.Margin()}
	require.NoError(t, file.Write(path))
	srv := learned.Server{Dir: dir, Concurrency: 4, Budget: budget, KubeletGrace: 25 * time.Second}
	start := srv.Start()
	got, err := learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 25*time.Second, got.KubeletGrace, "recorded at start: the file had none")
	assert.Equal(t, 400*time.Millisecond, got.Estimate, "what was learned stays")

	start.Save(nil, budget, nil)
	got, err = learned.Read(path)
	require.NoError(t, err)
	assert.Equal(t, 25*time.Second, got.KubeletGrace, "and saved at the shutdown")

	srv.KubeletGrace = 0 // restarted without -kubelet-grace (or without API access)
	srv.Start().Close()
	got, err = learned.Read(path)
	require.NoError(t, err)
	assert.Zero(t, got.KubeletGrace, "a server that knows none records none")

	bad := *got
	bad.KubeletGrace = -time.Second
	require.NoError(t, bad.Write(path))
	_, err = learned.Read(path)
	assert.ErrorContains(t, err, "kubelet_grace_ns must not be negative")
}

// A start that rewrites the file's limit (Server.Start) must leave the
// level learned as it found it: Level reads a file from before
// learned_estimate_ns by max_limit, and max_limit is what the rewrite
// changes. Before, a fixed start rewrote an adaptive writer's file so that
// its level read as none (lost when the server then died before its Save,
// and drainkit plan saw nothing learned), and an adaptive start rewrote a
// fixed writer's file so that the level it had itself set aside (the
// fixed drain's estimate is not the level's) was taken by the next start
// with that estimate: fault 91 again (docs/faults.md entry 98).
func TestStartRewritingTheLimitKeepsTheLevelLearned(t *testing.T) {
	for _, tc := range []struct {
		name        string
		file        learned.Rates
		concurrency int
		level       int
		estimate    time.Duration
	}{
		{"adaptive writer, fixed start", learned.Rates{Estimate: 2 * time.Second, LearnedLimit: 16, Limit: 16, MaxLimit: 32}, 4, 16, 2 * time.Second},
		{"fixed writer, adaptive start", learned.Rates{Estimate: time.Second, LearnedLimit: 16, Limit: 4}, 0, 0, 0},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, learned.File)
		require.NoError(t, tc.file.Write(path))
		srv := learned.Server{Dir: dir, Concurrency: tc.concurrency, Prior: 500 * time.Millisecond}
		start := srv.Start()
		first := start.Config()
		got, err := learned.Read(path)
		require.NoError(t, err)
		require.NotEqual(t, tc.file.MaxLimit, got.MaxLimit, "%s: the limit rewritten", tc.name)
		level, est := got.Level()
		assert.Equal(t, tc.level, level, "%s: the level", tc.name)
		assert.Equal(t, tc.estimate, est, "%s: its estimate", tc.name)

		// The server died before its Save (its lock released with it):
		// the next start is this one's.
		start.Close()
		again := srv.Start().Config()
		assert.Equal(t, first.Limit, again.Limit, "%s: the next start's limit", tc.name)
		assert.Equal(t, first.Estimator.Estimate(), again.Estimator.Estimate(), "%s: the next start's estimate", tc.name)
	}
}

// An adaptive start takes the level's estimate (LearnedEstimate), not the
// last drain's (Estimate): when that Config does not fit, Cold's log line
// names the estimate set aside, the one the Config used, and the file it
// came from, so that the operator can tell which number of which file was
// refused.
func TestColdNamesTheEstimateItSetAsideAndItsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	r := learned.Rates{Estimate: time.Second, LearnedLimit: 16, LearnedEstimate: 40 * time.Hour, MaxLimit: 32}
	require.NoError(t, r.Write(path))
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Prior: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	defer st.Close()
	cfg := st.Config()
	require.Equal(t, 40*time.Hour, cfg.Estimator.Estimate(), "the level's estimate")
	_, ok := st.Cold(errors.New("does not fit"))
	require.True(t, ok)
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "does not fit the grace period") {
			line = l
		}
	}
	require.NotEmpty(t, line, logs.String())
	assert.Contains(t, line, "estimate=40h0m0s", "the estimate the Config used")
	assert.Contains(t, line, "file="+path)
}

// A start with no rates file is cold, and says so, naming the file it
// looked for (the package doc: "a missing or unreadable file is a cold
// start ..., logged"): a state directory that does not outlive the pod (an
// emptyDir where a hostPath was meant) makes every start cold, and the
// log is where that shows.
func TestStartWithNoFileSaysItIsCold(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Prior: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	defer st.Close()
	assert.Equal(t, 3*time.Second, st.Config().Estimator.Estimate())
	assert.Contains(t, logs.String(), "starting cold")
	assert.Contains(t, logs.String(), "file="+filepath.Join(dir, learned.File))
}

// TestStartLimitIsWhereTheFirstRoundRuns checks StartLimit against what a
// Run does: as many preserves in flight at once, in its first round, as
// StartLimit says, for the default start, a ceiling below it and a fixed
// limit; and a Config pause refuses is refused here too.
func TestStartLimitIsWhereTheFirstRoundRuns(t *testing.T) {
	for _, cfg := range []pause.Config{{}, {MaxLimit: 3}, {Limit: 5, MaxLimit: 5}} {
		start, err := learned.StartLimit(cfg)
		require.NoError(t, err)
		assert.Equal(t, firstRound(t, cfg), start, "%+v", cfg)
	}
	_, err := learned.StartLimit(pause.Config{Limit: -1})
	assert.ErrorContains(t, err, "Limit")
}

// firstRound returns how many of 40 preserves a Preserver built with cfg
// has in flight at once when its Run starts: each preserve blocks until
// the first round is counted.
func firstRound(t *testing.T, cfg pause.Config) int {
	var n int
	synctest.Test(t, func(t *testing.T) {
		var (
			inFlight atomic.Int64
			release  = make(chan struct{})
			listed   atomic.Bool
		)
		sbs := make([]pause.Sandbox, 40)
		for i := range sbs {
			sbs[i] = blocked{id: fmt.Sprint("sb-", i), inFlight: &inFlight, release: release}
		}
		list := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
			if listed.Swap(true) {
				return nil, nil // preserved: a node lists them no more
			}
			return sbs, nil
		})
		p, err := pause.New(list, cfg)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() { defer close(done); p.Run(context.Background(), time.Now().Add(time.Hour)) }()
		synctest.Wait() // every preserve the first round started is blocked
		n = int(inFlight.Load())
		close(release)
		<-done
	})
	return n
}

// blocked is a sandbox whose preserve waits for release.
type blocked struct {
	id       string
	inFlight *atomic.Int64
	release  chan struct{}
}

func (b blocked) ID() string { return b.id }

func (b blocked) Preserve(ctx context.Context) error {
	b.inFlight.Add(1)
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
