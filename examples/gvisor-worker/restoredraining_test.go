//go:build linux

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
)

// A Restore refused while the worker drains was told to "retry on another node", the
// gate's words for new work: a checkpoint lives in this worker's state directory (a
// hostPath), which no other node has, and a client that did as told found no such
// sandbox there (NotFound), as if it were gone. The refusal of a sandbox checkpointed
// here now says to restore it here once the worker serves again; a Run, and a Restore of
// an ID this worker does not have, keep the gate's words.
func TestRestoreRefusedWhileDrainingSaysTheCheckpointIsHere(t *testing.T) {
	t.Parallel()
	c, r := checkpointedWhileDraining(t)

	_, err := c.Restore(context.Background(), r.ID)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	msg := status.Convert(err).Message()
	assert.NotContains(t, msg, "another node")
	assert.Contains(t, msg, "its checkpoint is in this worker's state directory, which no other node has: restore it here once the worker serves again")
	assert.Contains(t, msg, r.ID)

	_, err = c.Restore(context.Background(), "not-here")
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "retry on another node", "a sandbox this worker does not have")
	_, err = c.Run(context.Background(), &RunRequest{})
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "retry on another node")
}

// checkpointedWhileDraining serves a worker, checkpoints a sandbox run on it, and starts
// its drain with the preStop call (no wait), returning, once its gate refuses new work,
// the worker's client and the sandbox.
func checkpointedWhileDraining(t *testing.T) (*Client, *SandboxReply) {
	t.Helper()
	w, c, _ := serveWorker(t, fakeConfig(t))
	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	cp, err := c.Checkpoint(context.Background(), r.ID)
	require.NoError(t, err)
	require.Equal(t, sandbox.Paused, cp.State)

	rec := httptest.NewRecorder()
	w.drainer.PreStop().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/drain?wait=0s", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	<-w.drainer.Gate().Draining()
	return c, r
}
