//go:build linux

package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// unreadableImageRunsc returns a runsc wrapper whose checkpoints are runsc's own, the
// real image then replaced with caughtExiting's whose metadata names a compression
// runsc.SavedRunning does not read ("zstd": a format a runsc newer than this code may
// write): the save is made, and what it holds cannot be read.
func unreadableImageRunsc(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(caughtExiting)
	require.NoError(t, err)
	n := binary.BigEndian.Uint64(raw[8:16])
	var meta map[string]string
	require.NoError(t, json.Unmarshal(raw[16:16+n], &meta))
	meta["compression"] = "zstd"
	m, err := json.Marshal(meta)
	require.NoError(t, err)
	img := binary.BigEndian.AppendUint64([]byte("gVisorSF"), uint64(len(m)))
	img = append(append(img, m...), raw[16+n:]...)
	unreadable := filepath.Join(t.TempDir(), "checkpoint.img")
	require.NoError(t, os.WriteFile(unreadable, img, 0o600))
	return imageReplacingRunsc(t, unreadable)
}

// Fault: an image runsc.SavedRunning cannot read (a format of a newer runsc: row 1780
// found three, each "cannot read" before it) was taken as made, silently: the drain's
// Report said preserved, with no error, of a sandbox whose save no one knew to hold a
// workload that runs (one caught exiting restores as nothing). The save is kept now, its
// record written and the sandbox listed paused (a restore may bring it back, and tells),
// and its preserve fails for good with why: the Report's entry is Failed, its error
// naming the image and the format, and the node's ERROR line says so. Before: Preserved,
// no error, no line.
func TestCheckpointWhoseImageCannotBeReadIsAnErrorInTheReport(t *testing.T) {
	n, rt, st := newRunscNode(t)
	defer n.Close()
	var logs logbuf.Buffer
	n.logger = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	rt.Runtime.Binary = unreadableImageRunsc(t)

	p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 1})
	require.NoError(t, err)
	rep := p.Run(ctx, time.Now().Add(time.Minute))
	require.Len(t, rep.Entries, 1)
	e := rep.Entries[0]
	assert.Equal(t, pause.Failed, e.Outcome, "before: preserved, silently")
	assert.Equal(t, 1, e.Attempts, "no retry: the save is made, and kept")
	assert.Contains(t, e.Error, `compression "zstd"`, "the format it could not read")
	assert.Contains(t, e.Error, rt.Image(a.ID))

	require.Len(t, n.List(), 1)
	assert.Equal(t, Paused, n.List()[0].State, "its save is kept: a restore may bring it back")
	recs, _, err := st.Load()
	require.NoError(t, err)
	require.Len(t, recs, 1, "recorded, for the next server")
	assert.FileExists(t, filepath.Join(rt.Image(a.ID), "checkpoint.img"))
	assert.Contains(t, logs.String(), "level=ERROR")
}
