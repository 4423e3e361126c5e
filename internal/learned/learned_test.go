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
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRatesRoundTripThroughTheFile(t *testing.T) {
	e := deadline.NewEstimator(time.Second)
	for _, d := range []time.Duration{100, 200, 300, 400} {
		e.Observe(d * time.Millisecond)
	}
	r := learned.Rates{Written: time.Unix(1700000000, 0).UTC(), Limit: 4, Grace: 30 * time.Second, Margin: 3 * time.Second,
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
		`{`:                    "unexpected end of JSON",
		`{"estimate_ns": -1}`:  "estimate_ns is negative",
		`{"limit": -2}`:        "limit is negative",
		`{"grace_ns": -5}`:     "grace_ns and margin_ns",
		`{"mean_ns": -3}`:      "mean_ns is negative",
		`{"p90_ns": -4}`:       "p90_ns is negative",
		`{"observations": -1}`: "observations is negative",
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
