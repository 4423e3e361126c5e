package learned_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// A shutdown that measured no preserve (a node with no sandbox running)
// writes its Estimator's prior as the estimate, observations 0: the
// configured estimate of the server that wrote it, nothing learned. The
// next server started from it all the same, in place of its own Prior: an
// operator who raised -pause-latency from 500 ms to 2 s (bigger sandboxes)
// had the drain planned at 500 ms a pause, its preStop wait ran to 18.7 s
// of a 30 s grace and 8 of 16 sandboxes were lost, where the same server
// with nothing learned waited 0 s and kept all 16. An estimate no preserve
// measured now starts the server from its own Prior, said at WARN.
//
//	server A, Prior 500 ms, drains no sandbox:  estimate 500 ms, observations 0
//	server B, Prior 2 s, 16 sandboxes, 1 s each alone on a disk that writes one at full speed
//	  before: planned at 500 ms, 8/16 kept;  after: at 2 s, 16/16, as with no file
func TestAnEstimateNoPreserveMeasuredDoesNotReplaceTheServersPrior(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, rep := terminate(t, learned.Server{Dir: dir, Prior: 500 * time.Millisecond}, newDiskNode(4, 0), 30*time.Second)
		require.NoError(t, rep.Err())
		r, err := learned.Read(filepath.Join(dir, learned.File))
		require.NoError(t, err)
		require.Zero(t, r.Observations, "nothing measured")

		var logs bytes.Buffer
		srv := learned.Server{Dir: dir, Prior: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		_, rep = terminate(t, srv, newNoisyNode(1, 16, 0, 1), 30*time.Second)
		_, cold := terminate(t, learned.Server{Dir: t.TempDir(), Prior: 2 * time.Second}, newNoisyNode(1, 16, 0, 1), 30*time.Second)
		require.Equal(t, 16, cold.Preserve.Counts[pause.Preserved], "with nothing learned")
		assert.Equal(t, 16, rep.Preserve.Counts[pause.Preserved], "never worse than nothing learned: %v", rep.Err())
		assert.Contains(t, logs.String(), `level=WARN msg="learned rates hold no measured estimate (observations 0: the prior of the server that wrote them); starting cold, from this server's prior"`)
		assert.Contains(t, logs.String(), "estimate=500ms prior=2s")
	})
}

// What a shutdown learned is not lost to the next one that measures no
// preserve: that one keeps the file's estimate with its observations, so
// the start after it still starts from it (not from its own Prior, as
// from an estimate never measured).
func TestAShutdownThatMeasuredNothingKeepsTheLearnedEstimate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, rep := terminate(t, learned.Server{Dir: dir, Concurrency: 4, Prior: 3 * time.Second}, newDiskNode(4, 8), 60*time.Second)
		require.NoError(t, rep.Err())
		first, err := learned.Read(filepath.Join(dir, learned.File))
		require.NoError(t, err)
		require.Positive(t, first.Observations)

		_, rep = terminate(t, learned.Server{Dir: dir, Concurrency: 4, Prior: 3 * time.Second}, newDiskNode(4, 0), 60*time.Second)
		require.NoError(t, rep.Err())
		kept, err := learned.Read(filepath.Join(dir, learned.File))
		require.NoError(t, err)
		assert.Equal(t, first.Estimate, kept.Estimate)
		assert.Equal(t, first.Observations, kept.Observations)

		st := learned.Server{Dir: dir, Concurrency: 4, Prior: 3 * time.Second}.Start()
		defer st.Close()
		assert.Equal(t, first.Estimate, st.Config().Estimator.Estimate(), "the learned estimate, not the prior")
	})
}

// The file a server starts from with an estimate no preserve measured is
// rewritten with the server's own Prior, which it starts from: drainkit
// plan, reading the file, said "the server's prior (no pause measured
// yet)" of the prior of the server before (500 ms), not this one's (2 s).
func TestAnEstimateNoPreserveMeasuredIsRecordedAsTheServersPrior(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		_, rep := terminate(t, learned.Server{Dir: dir, Prior: 500 * time.Millisecond}, newDiskNode(4, 0), 30*time.Second)
		require.NoError(t, rep.Err())
		st := learned.Server{Dir: dir, Prior: 2 * time.Second}.Start()
		defer st.Close()
		r, err := learned.Read(filepath.Join(dir, learned.File))
		require.NoError(t, err)
		assert.Equal(t, 2*time.Second, r.Estimate)
		assert.Zero(t, r.Observations)
		assert.Equal(t, 2*time.Second, st.Config().Estimator.Estimate())
	})
}
