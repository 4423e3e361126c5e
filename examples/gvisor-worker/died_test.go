//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// A gVisor sandbox whose sandbox process died before the drain (the kernel's OOM killer
// SIGKILLs it, as here) was counted lost: its checkpoint failed, "cannot checkpoint
// container in state stopped", and was retried to the phase deadline, and the worker
// exited 1 for a sandbox no drain could have saved. It is now in the Report as vanished,
// its entry saying it had died before its checkpoint and why as far as runsc knows, with
// a WARN line, once (the node's, shared with sandboxd); it is listed no more, and the
// drain of the others is clean.
func TestSandboxKilledBeforeTheDrainIsDeadNotLost(t *testing.T) {
	cfg := runscConfig(t)
	var logs logbuf.Buffer
	w, c, stop := serveWorkerWith(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	rs := w.rt.(*sandbox.Runsc)

	dead, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	alive, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	waitCount(t, rs.Bundle(dead.ID), 2)
	waitCount(t, rs.Bundle(alive.ID), 2)
	killed := false
	for _, pid := range runsc.SandboxProcesses(rs.Bundle(dead.ID).Dir) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.HasPrefix(cmd, []byte("runsc-sandbox\x00")) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL)) // as the OOM killer does
			killed = true
		}
	}
	require.True(t, killed, "no runsc-sandbox process of %s", dead.ID)
	require.Eventually(t, func() bool {
		st, err := rs.Runtime.State(context.Background(), dead.ID)
		return err == nil && st.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond)

	rep := stop() // as SIGTERM would
	require.NotNil(t, rep.Preserve)
	assert.NoError(t, rep.Err(), "nothing the drain could save was lost: %s", &logs)
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the live one checkpointed")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Vanished], "the dead one: %+v", rep.Preserve.Entries)
	for _, e := range rep.Preserve.Entries {
		if e.ID == dead.ID {
			assert.Equal(t, pause.Vanished, e.Outcome)
			assert.Contains(t, e.Error, "died before its checkpoint")
			assert.Contains(t, e.Error, "runsc does not have its exit status", "what runsc knows of why")
		}
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN msg=\"sandbox died before its checkpoint"), "said once: %s", &logs)
	assert.Contains(t, logs.String(), dead.ID)
	for _, sb := range w.node.List() {
		assert.NotEqual(t, dead.ID, sb.ID, "the dead sandbox is listed no more: %+v", w.node.List())
	}
}

// A Checkpoint that finds its sandbox dead is FailedPrecondition, as for any sandbox not
// running: it was Internal, which tells a client to retry what cannot succeed.
func TestCheckpointOfADeadSandboxIsFailedPrecondition(t *testing.T) {
	_, err := reply(sandbox.Info{}, fmt.Errorf("pause sb-1: %w", sandbox.ErrDied))
	assert.Equal(t, codes.FailedPrecondition, status.Code(err))
	_, err = reply(sandbox.Info{}, errors.New("runsc checkpoint: exit status 1"))
	assert.Equal(t, codes.Internal, status.Code(err), "a failure that may pass")
}

// A Checkpoint that lost its sandbox (its checkpoint failed and stopped it) is DataLoss:
// its state is gone, and no retry brings it back.
func TestCheckpointThatLostItsSandboxIsDataLoss(t *testing.T) {
	_, err := reply(sandbox.Info{}, fmt.Errorf("pause sb-1: %w", sandbox.ErrLost))
	assert.Equal(t, codes.DataLoss, status.Code(err))
}
