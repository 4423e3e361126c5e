package learned_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/learned"
)

// A rates file whose estimate of one preserve is zero (a hand edit, a
// damaged file: a server writes its Estimator's, never zero) starts the
// server cold, its Estimator from Prior and its limit from 8, the level in
// the file unused: the log said only "learned rates loaded estimate=0s",
// as if the drain would plan with it. It now says, at WARN, that the file
// holds no estimate and the start is cold, naming the file and the prior.
func TestStartFromAFileWithNoEstimateSaysItIsCold(t *testing.T) {
	dir := t.TempDir()
	r := learned.Rates{Written: time.Now(), Observations: 20, Limit: 8, LearnedLimit: 16, LearnedEstimate: time.Second, MaxLimit: 32}
	require.NoError(t, r.Write(filepath.Join(dir, learned.File)))
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Prior: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	defer st.Close()
	cfg := st.Config()
	assert.Equal(t, 3*time.Second, cfg.Estimator.Estimate(), "cold: the prior")
	assert.Zero(t, cfg.Limit, "cold: the limit from 8, not the level 16")
	assert.Contains(t, logs.String(), `level=WARN msg="learned rates hold no estimate of one preserve (estimate_ns 0); starting cold"`)
	assert.Contains(t, logs.String(), "file="+filepath.Join(dir, learned.File))
	assert.Contains(t, logs.String(), "prior=3s")
}

// A learned level above the server's ceiling (10^9: a hand edit, a damaged
// file; or a ceiling lowered since) is capped at the ceiling, as Config's
// doc says, and the log said only "learned rates loaded
// learned_concurrency=1000000000", a level the drain never ran at. It now
// says the server starts at its ceiling, with the level and the file.
func TestStartFromALevelAboveTheCeilingSaysItStartsAtTheCeiling(t *testing.T) {
	dir := t.TempDir()
	r := learned.Rates{Written: time.Now(), Estimate: time.Second, Observations: 20, Limit: 8,
		LearnedLimit: 1_000_000_000, LearnedEstimate: time.Second, MaxLimit: 32}
	require.NoError(t, r.Write(filepath.Join(dir, learned.File)))
	var logs bytes.Buffer
	st := learned.Server{Dir: dir, Ceiling: 32, Prior: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}.Start()
	defer st.Close()
	cfg := st.Config()
	assert.Equal(t, 32, cfg.Limit, "capped at the ceiling")
	assert.Equal(t, time.Second, cfg.Estimator.Estimate(), "with the level's estimate")
	assert.Contains(t, logs.String(), `level=WARN msg="learned level above this server's ceiling; starting at the ceiling"`)
	assert.Contains(t, logs.String(), "learned_concurrency=1000000000 ceiling=32")
	assert.Contains(t, logs.String(), "file="+filepath.Join(dir, learned.File))

	// A fixed -concurrency starts from no level: nothing to say of it.
	logs.Reset()
	fixed := learned.Server{Dir: t.TempDir(), Concurrency: 4, Ceiling: 32, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	require.NoError(t, r.Write(filepath.Join(fixed.Dir, learned.File)))
	st2 := fixed.Start()
	defer st2.Close()
	assert.Equal(t, 4, st2.Config().Limit)
	assert.NotContains(t, logs.String(), "above this server's ceiling")
}
