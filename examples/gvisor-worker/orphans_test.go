//go:build linux

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// A worker SIGKILLed while `runsc checkpoint` wrote an image (its drain ran out of grace)
// left the half-written image, which no record names (the record is written only once the
// image is complete), and the bundles of the sandboxes it lost running: no later worker
// knew them, and they stayed on the hostPath for ever, an image as large as its sandbox's
// memory per checkpoint cut. The next worker now removes them at start; a sandbox with a
// record, or with a damaged one NewNode skipped, keeps everything.
func TestWorkerRemovesWhatSandboxesWithoutARecordLeft(t *testing.T) {
	cfg := runscConfig(t)
	dir := filepath.Join(cfg.StateDir, "runsc")
	put := func(path string, size int) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, make([]byte, size), 0o600))
	}
	// The one a SIGKILL cut mid-checkpoint, one lost running, one checkpointed, one whose
	// record is torn.
	put(filepath.Join(dir, "images", "sb-cut", "checkpoint.img"), 1<<20)
	put(filepath.Join(dir, "bundles", "sb-cut", "config.json"), 10)
	put(filepath.Join(dir, "bundles", "sb-lost", "config.json"), 10)
	put(filepath.Join(dir, "images", "sb-kept", "checkpoint.img"), 1<<10)
	put(filepath.Join(dir, "bundles", "sb-kept", "config.json"), 10)
	put(filepath.Join(dir, "images", "sb-torn", "checkpoint.img"), 1<<10)
	st, err := store.Open(filepath.Join(cfg.StateDir, "records"))
	require.NoError(t, err)
	require.NoError(t, st.Put(store.Record{ID: "sb-kept", State: sandbox.Paused, Runtime: "runsc",
		Image: filepath.Join(dir, "images", "sb-kept"), TimeoutS: 60, PausedAt: time.Now()}))
	put(filepath.Join(cfg.StateDir, "records", "sb-torn.rec"), 3)

	w, _, stop := serveWorker(t, cfg)
	defer stop()
	for _, gone := range []string{"images/sb-cut", "bundles/sb-cut", "bundles/sb-lost"} {
		_, err := os.Stat(filepath.Join(dir, gone))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s is removed", gone)
	}
	for _, kept := range []string{"images/sb-kept/checkpoint.img", "bundles/sb-kept", "images/sb-torn/checkpoint.img"} {
		_, err := os.Stat(filepath.Join(dir, kept))
		assert.NoError(t, err, "%s is kept", kept)
	}
	assert.Equal(t, 1, w.node.Count(sandbox.Paused), "sb-kept is the worker's")
}

// Fault (an audit): the sweep read the records directory ignoring its error. A listing
// that failed (EIO, no descriptors left) read as no records at all, and every image whose
// sandbox's record NewNode had skipped as damaged (kept, above, for whoever repairs it)
// was taken for an orphan and destroyed. A sweep that cannot read the records now removes
// nothing, and says why.
func TestOrphanSweepThatCannotReadTheRecordsRemovesNothing(t *testing.T) {
	cfg := runscConfig(t)
	w, _, stop := serveWorker(t, cfg)
	defer stop()
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil)) // the serving worker's logger is its own
	img := filepath.Join(cfg.StateDir, "runsc", "images", "sb-torn", "checkpoint.img")
	require.NoError(t, os.MkdirAll(filepath.Dir(img), 0o700))
	require.NoError(t, os.WriteFile(img, make([]byte, 1<<10), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "records", "sb-torn.rec"), []byte("tor"), 0o600))

	w.node.SweepOrphans(filepath.Join(cfg.StateDir, "records-unreadable"), logger)
	_, err := os.Stat(img)
	assert.NoError(t, err, "the damaged record's image is kept")
	assert.Contains(t, logs.String(), "records-unreadable")
	assert.Contains(t, logs.String(), "nothing removed")
}
