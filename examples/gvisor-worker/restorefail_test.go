//go:build linux

package main

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
)

// Fault (row 1071): a checkpoint that runsc cannot restore (its image damaged, here cut
// to half its size; made by another runsc) failed the Restore with runsc's words to the
// client alone: the worker's log said nothing, so the operator who read a drain's Report
// counting the sandbox preserved had no word of it never coming back. The failure is now
// an ERROR line naming the sandbox and runsc's words; the sandbox stays paused, its
// record and image kept, and a Restore once the image is whole again resumes it where
// it was.
func TestRestoreThatRunscCannotDoIsLoggedAndKept(t *testing.T) {
	cfg := runscConfig(t)
	var logs logbuf.Buffer
	w, c, _ := serveWorkerWith(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	rs := w.rt.(*sandbox.Runsc)
	r := runCheckpointed(t, c, rs)
	img := rs.Image(r.ID)
	whole := filepath.Join(t.TempDir(), "whole")
	require.NoError(t, exec.Command("cp", "-a", img, whole).Run())
	cut := filepath.Join(img, "checkpoint.img")
	fi, err := os.Stat(cut)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(cut, fi.Size()/2))

	_, err = c.Restore(context.Background(), r.ID)
	require.Error(t, err)
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	assert.Contains(t, logs.String(), `level=ERROR msg="restore failed: the sandbox stays paused, its checkpoint kept; a Restore may be retried" id=`+r.ID,
		"before: nothing in the worker's log:\n%s", &logs)
	assert.Contains(t, logs.String(), "restoring container", "runsc's words in the line")
	list, err := c.List(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []SandboxReply{{ID: r.ID, State: sandbox.Paused}}, list.Sandboxes)
	assert.FileExists(t, filepath.Join(cfg.StateDir, "records", r.ID+".rec"), "its record kept")

	require.NoError(t, os.RemoveAll(img))
	require.NoError(t, exec.Command("cp", "-a", whole, img).Run())
	saved, err := rs.Bundle(r.ID).Counter()
	require.NoError(t, err)
	_, err = c.Restore(context.Background(), r.ID)
	require.NoError(t, err, "retried once the image is whole")
	waitCount(t, rs.Bundle(r.ID), saved+1)
	counts, err := rs.Bundle(r.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
}

// runCheckpointed runs a counter sandbox through c on the worker whose runtime is rs, and
// checkpoints it once it has counted past 2.
func runCheckpointed(t *testing.T, c *Client, rs *sandbox.Runsc) *SandboxReply {
	t.Helper()
	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	waitCount(t, rs.Bundle(r.ID), 2)
	_, err = c.Checkpoint(context.Background(), r.ID)
	require.NoError(t, err)
	return r
}
