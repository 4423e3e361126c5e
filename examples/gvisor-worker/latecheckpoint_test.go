package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/pause"
)

// The Preserver starts no checkpoint after the preserve phase's deadline: the time after
// it is the escalate step's (the SIGTERM that lets a sandbox's actor save itself, then
// SIGKILL) and the grpc step's. A client's Checkpoint, which the gate admits during the
// drain, started all the same: the escalate step waited for it in vain and named the
// sandbox, "still held at the escalate step's deadline: not signalled", and the grpc
// step cut the call (a runsc checkpoint, never cut, runs on into the kubelet's SIGKILL).
// Once the phase's deadline has passed a Checkpoint is now refused at once,
// FailedPrecondition, saying why, and the sandbox is left to the escalation.
func TestCheckpointAfterThePreserveDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t)
	cfg.Grace = 10 * time.Second
	cfg.Concurrency = 1
	cfg.PauseLatency = 4 * time.Second // one at a time: the third is never started
	w, c, stop := serveWorker(t, cfg)
	for range 3 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
	}
	ended := make(chan *drain.Report, 1)
	go func() { ended <- stop() }()     // as SIGTERM would
	require.Eventually(t, func() bool { // the escalations begun at the preserve phase's deadline
		w.stops.mu.Lock()
		defer w.stops.mu.Unlock()
		return w.stops.early != nil
	}, 30*time.Second, 5*time.Millisecond, "the preserve phase's deadline never passed")
	var left string
	for _, info := range w.node.List() {
		if info.State == sandbox.Running {
			left = info.ID
		}
	}
	require.NotEmpty(t, left, "no sandbox left running at the preserve deadline")

	start := time.Now()
	_, err := c.Checkpoint(context.Background(), left)
	took := time.Since(start)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v (after %v)", err, took)
	assert.Contains(t, status.Convert(err).Message(), "the drain's preserve phase ended")
	rep := <-ended
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	assert.NotContains(t, esc.Error, left, "the escalate step waited for the client's checkpoint")
	require.NotNil(t, rep.Preserve)
	for _, e := range rep.Preserve.Entries {
		if e.ID == left {
			assert.Equal(t, pause.NotStarted, e.Outcome)
		}
	}
}
