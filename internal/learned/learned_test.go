package learned_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		`{`:                     "unexpected end of JSON",
		`{"estimate_ns": -1}`:   "estimate_ns is negative",
		`{"limit": -2}`:         "limit is negative",
		`{"learned_limit": -2}`: "learned_limit is negative",
		`{"max_limit": -32}`:    "max_limit is negative",
		`{"grace_ns": -5}`:      "grace_ns and margin_ns",
		`{"mean_ns": -3}`:       "mean_ns is negative",
		`{"p90_ns": -4}`:        "p90_ns is negative",
		`{"observations": -1}`:  "observations is negative",
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

// FromReport keeps what the shutdown's Preserver learned, or, when it
// learned nothing (a fixed limit, a drain too short to compare two
// limits, no Preserver at all), what the shutdown before it learned.
func TestFromReportKeepsTheLastLearnedLimit(t *testing.T) {
	prev := &learned.Rates{LearnedLimit: 16, Limit: 20}
	for _, tc := range []struct {
		name         string
		rep          *pause.Report
		prev         *learned.Rates
		limit, learn int
	}{
		{"learned", &pause.Report{Limit: 40, LearnedLimit: 32}, prev, 40, 32},
		{"learned none", &pause.Report{Limit: 8}, prev, 8, 16},
		{"no preserver", nil, prev, 4, 16},
		{"nothing before", &pause.Report{Limit: 8}, nil, 8, 0},
	} {
		r := learned.Rates{Limit: 4}
		r.FromReport(tc.rep, tc.prev)
		assert.Equal(t, tc.limit, r.Limit, tc.name)
		assert.Equal(t, tc.learn, r.LearnedLimit, tc.name)
	}
}
