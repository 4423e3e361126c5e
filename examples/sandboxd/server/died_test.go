package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// Fault: with -runtime runsc, a sandbox whose gVisor sandbox process died before the
// drain (SIGKILLed, as the kernel's OOM killer does) stayed "running" in the node after
// the checkpoint that found it dead, so the Preserver listed it again in every pass, with
// growing waits, until the preserve phase's deadline, and nothing above DEBUG said a
// sandbox had died. The node now forgets it, saying so at WARN: the drain ends once the
// live one is checkpointed, the dead one vanished.
func TestRunscSandboxKilledBeforeTheDrainIsDeadNotLost(t *testing.T) {
	cfg := runscConfig(t)
	var logs logbuf.Buffer
	st := startLogged(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	rs := st.s.rt.(*sandbox.Runsc)
	t.Cleanup(func() { _ = rs.Runtime.DeleteAll(context.Background()) })
	dead, alive := createSandbox(t, st.base), createSandbox(t, st.base)
	for _, id := range []string{dead, alive} {
		require.Eventually(t, func() bool { n, err := rs.Bundle(id).Counter(); return err == nil && n > 1 },
			time.Minute, 20*time.Millisecond)
	}
	killed := false
	for _, pid := range runsc.SandboxProcesses(rs.Bundle(dead).Dir) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.HasPrefix(cmd, []byte("runsc-sandbox\x00")) {
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL)) // as the OOM killer does
			killed = true
		}
	}
	require.True(t, killed, "no runsc-sandbox process of %s", dead)
	require.Eventually(t, func() bool {
		s, err := rs.Runtime.State(context.Background(), dead)
		return err == nil && s.Status == "stopped"
	}, 30*time.Second, 20*time.Millisecond)

	rep := st.shutdown(t)
	require.NotNil(t, rep.Preserve)
	assert.NoError(t, rep.Err(), "nothing the drain could save was lost: %s", &logs)
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Preserved], "the live one checkpointed")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Vanished], "the dead one: %+v", rep.Preserve.Entries)
	for _, e := range rep.Preserve.Entries {
		if e.ID == dead {
			assert.Equal(t, pause.Vanished, e.Outcome)
			assert.Equal(t, 1, e.Attempts, "found dead once")
			assert.Zero(t, e.Relisted, "and listed no more")
			assert.Contains(t, e.Error, "died before its checkpoint")
		}
	}
	ph := rep.Phase(drain.PhasePreserve)
	require.NotNil(t, ph)
	assert.Equal(t, drain.OK, ph.Result)
	assert.True(t, ph.End.Before(ph.Deadline), "the phase ended when the live sandbox was checkpointed, not at its deadline: %+v", ph)
	assert.Contains(t, logs.String(), "level=WARN msg=\"sandbox died before its checkpoint")
	assert.Contains(t, logs.String(), dead)
}

// A pause that finds its sandbox dead answers 409, as for any sandbox not running: it
// answered 500, a server error that clients retry, and no retry can pause a dead sandbox.
func TestPauseOfADeadSandboxIsAConflictNotAServerError(t *testing.T) {
	err := fmt.Errorf("pause sb-1: %w", sandbox.ErrDied)
	assert.Equal(t, http.StatusConflict, status(err))
	assert.Equal(t, http.StatusInternalServerError, status(errors.New("runsc checkpoint: exit status 1")), "a failure that may pass")
}

// Fault (a review of row 380): a pause whose checkpoint failed and stopped the sandbox
// (sandbox.ErrLost: its state gone, listed lost) answered 500, the server error that
// clients retry, as ErrDied did before; the retry only finds it lost (409). The gVisor
// worker answers it DataLoss since row 380, "no retry brings it back"; sandboxd, on the
// same Node with -runtime runsc, did not follow.
func TestPauseThatLostItsSandboxIsNotAServerErrorToRetry(t *testing.T) {
	err := fmt.Errorf("pause sb-1: %w", sandbox.ErrLost)
	assert.NotEqual(t, http.StatusInternalServerError, status(err), "no retry can pause a lost sandbox")
}
