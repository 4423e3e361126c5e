//go:build linux

package main

import (
	"context"
	"slices"
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

// A drain forced during its preserve phase (a second Ctrl-C, drainkit's force) starts no
// preserve after it, and the escalate step gets its reserve from then: a client's
// Checkpoint is refused as after the phase's deadline, but its words said the phase
// "ended at its deadline", which it had not, and a budget that moved SIGKILL later then
// let checkpoints start again, where a forced drain runs no phase again. It now says the
// drain was forced, and holds.
func TestCheckpointAfterAForcedPreservePhaseSaysForced(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t)
	cfg.Concurrency = 1
	cfg.PauseLatency = 2 * time.Second // one at a time: the others wait
	w, c, stop := serveWorker(t, cfg)
	for range 3 {
		_, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
	}
	ended := make(chan *drain.Report, 1)
	go func() { ended <- stop() }() // as SIGTERM would
	require.Eventually(t, func() bool { return len(w.stops.inFlight()) > 0 },
		30*time.Second, 5*time.Millisecond, "no checkpoint of the preserve phase began")
	w.drainer.Force()
	require.Eventually(t, func() bool { return w.preserveOver.Load() != nil },
		30*time.Second, 5*time.Millisecond, "the forced preserve phase never ended")
	var left string
	for _, info := range w.node.List() {
		if info.State == sandbox.Running && !slices.Contains(w.stops.inFlight(), info.ID) {
			left = info.ID
		}
	}
	require.NotEmpty(t, left, "no sandbox left running at the force")

	_, err := c.Checkpoint(context.Background(), left)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	msg := status.Convert(err).Message()
	assert.Contains(t, msg, "the drain was forced")
	assert.NotContains(t, msg, "at its deadline")

	b := w.drainer.Budget() // a restarted kubelet's new grace: a forced drain runs no phase again
	kill := b.Kill()
	b.OnRestart(time.Now(), time.Hour)
	require.True(t, b.Kill().After(kill), "SIGKILL moved later")
	_, err = c.Checkpoint(context.Background(), left)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	<-ended
}
