//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/runsc"
)

// A client whose Checkpoint call ends (its deadline, a Ctrl-C) while gVisor is writing the
// image: the sandbox finishes the checkpoint and stops whatever happens to the runsc
// client, so killing that client at the call's end only lost the answer. The worker then
// said the sandbox was running though it had stopped, its next Checkpoint deleted the
// complete image before failing, and the sandbox was lost. The worker now lets the
// started checkpoint end: the sandbox is paused, recorded, and restores where it was.
func TestCheckpointWhoseClientIsGoneStillEndsPaused(t *testing.T) {
	w, c, _ := serveWorker(t, runscConfig(t))
	rs := w.rt.(*sandbox.Runsc)

	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	waitCount(t, rs.Bundle(r.ID), 2)

	// The client gives up once gVisor has begun writing the image.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-tick.C:
			}
			if fi, err := os.Stat(filepath.Join(rs.Image(r.ID), "checkpoint.img")); err == nil && fi.Size() > 0 {
				ccancel()
				return
			}
		}
	}()
	_, err = c.Checkpoint(cctx, r.ID)
	<-writing
	if err == nil { // the rest holds either way: paused, stopped, restorable where it was
		t.Log("the checkpoint ended before its client gave up (a busy machine delayed the poll)")
	} else {
		require.Equal(t, codes.Canceled, status.Code(err), "the client gave up: %v", err)
	}

	// The condition runs in a goroutine of its own, where require's FailNow must not be
	// called: a failed List or a wrong count ends the wait, checked here after it.
	var list *ListReply
	var listErr error
	require.Eventually(t, func() bool {
		list, listErr = c.List(context.Background())
		return listErr != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].State != sandbox.Pausing
	}, time.Minute, 10*time.Millisecond)
	require.NoError(t, listErr)
	require.Len(t, list.Sandboxes, 1)
	state := list.Sandboxes[0].State
	require.Equal(t, sandbox.Paused, state, "the worker says what runsc says: checkpointed, not running")
	st, err := rs.Runtime.State(context.Background(), r.ID)
	require.NoError(t, err)
	require.Equal(t, "stopped", st.Status, "gVisor finished the checkpoint without its client")
	saved, err := rs.Bundle(r.ID).Counter()
	require.NoError(t, err)

	_, err = c.Checkpoint(context.Background(), r.ID)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "already checkpointed: %v", err)
	_, err = c.Restore(context.Background(), r.ID)
	require.NoError(t, err, "restored from the image the checkpoint wrote")
	waitCount(t, rs.Bundle(r.ID), saved+2)
	counts, err := rs.Bundle(r.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
}
