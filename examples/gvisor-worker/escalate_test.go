package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/pause"
)

// A sandbox that cannot be checkpointed (here: its image directory cannot be created) is
// not left running until SIGKILL: after the preserve phase the escalate step SIGTERMs it
// (an actor saves itself on it), and the worker reports it not preserved.
func TestSandboxThatCannotBeCheckpointedIsSignalled(t *testing.T) {
	cfg := runscConfig(t)
	w, c, stop := serveWorker(t, cfg)
	rs := w.rt.(*sandbox.Runsc)

	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	bundle := rs.Bundle(r.ID)
	require.Eventually(t, func() bool { n, err := bundle.Counter(); return err == nil && n > 2 },
		time.Minute, 20*time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "runsc", "images"), nil, 0o600)) // checkpoints fail

	rep := stop() // SIGTERM
	require.Error(t, rep.Err(), "the sandbox was lost")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Failed]+rep.Preserve.Counts[pause.TimedOut])
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	assert.Equal(t, drain.OK, esc.Result, "SIGTERM was enough: %s", esc.Error)
	st, err := rs.Runtime.State(context.Background(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status, "the signalled container exited")
	assert.Positive(t, rep.Headroom)
}
