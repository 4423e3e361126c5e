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
