//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/logbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
)

// The test, with real gVisor: a worker runs three sandboxes whose process counts in
// memory; the kubelet SIGTERMs it; it checkpoints all three in parallel and exits before
// SIGKILL; a new worker on the same state directory restores them, and each counter goes on
// from where it was (1, 2, 3, ... with no restart and no gap).
func TestSIGTERMCheckpointsAndRestartedWorkerRestoresCounters(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	const grace = 30 * time.Second
	dir := t.TempDir()
	rt := sandbox.NewRunsc(filepath.Join(dir, "runsc"))
	t.Cleanup(func() { _ = rt.Runtime.DeleteAll(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	w1, stderr1 := startWorker(t, dir, grace)
	c := dial(t, filepath.Join(dir, "worker.sock"))
	var ids []string
	for range 3 {
		r, err := c.Run(ctx, &RunRequest{})
		require.NoError(t, err, "%s", stderr1)
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		waitCount(t, rt.Bundle(id), 3)
	}

	tl, err := kubeletsim.Terminate(ctx, w1, nil, grace) // no preStop hook: SIGTERM, grace, SIGKILL
	require.NoError(t, err)
	t.Logf("first worker:\n%s", tl)
	require.False(t, tl.Killed, "the worker exited before SIGKILL:\n%s", stderr1)
	require.NoError(t, w1.Err(), "exit 0: every sandbox checkpointed\n%s", stderr1)
	saved := map[string]int{}
	for _, id := range ids {
		n, err := rt.Bundle(id).Counter()
		require.NoError(t, err)
		saved[id] = n
		st, err := rt.Runtime.State(ctx, id)
		if err == nil {
			assert.Equal(t, "stopped", st.Status, "checkpointed, not running")
		} else {
			require.ErrorIs(t, err, runsc.ErrNotExist)
		}
	}

	w2, stderr2 := startWorker(t, dir, grace)
	c2 := dial(t, filepath.Join(dir, "worker.sock"))
	list, err := c2.List(ctx)
	require.NoError(t, err, "%s", stderr2)
	require.Len(t, list.Sandboxes, 3)
	for _, sb := range list.Sandboxes {
		assert.Equal(t, sandbox.Paused, sb.State, "loaded as checkpointed")
	}
	for _, id := range ids {
		r, err := c2.Restore(ctx, id)
		require.NoError(t, err, "%s", stderr2)
		assert.Equal(t, sandbox.Running, r.State)
	}
	for _, id := range ids {
		waitCount(t, rt.Bundle(id), saved[id]+3)
		counts, err := rt.Bundle(id).Counts()
		require.NoError(t, err)
		assert.True(t, runsc.ConsecutiveFromOne(counts), "%s restarted instead of resuming: %v", id, counts)
	}
	_ = w2.Kill()
	<-w2.Exited()
}

// startWorker runs the test binary as a worker on dir, in its own process group.
func startWorker(t *testing.T, dir string, grace time.Duration) (*kubeletsim.Child, *logbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-state-dir", dir, "-grace", grace.String(), "-runtime", "runsc",
		"-concurrency", "3")
	cmd.Env = append(os.Environ(), roleEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	child := kubeletsimtest.Start(t, cmd)
	waitSocket(t, filepath.Join(dir, "worker.sock"), &stderr) // the first worker's went with its clean exit
	return child, &stderr
}

func waitCount(t *testing.T, b runsc.Bundle, min int) {
	t.Helper()
	require.Eventually(t, func() bool {
		n, err := b.Counter()
		return err == nil && n > min
	}, 60*time.Second, 20*time.Millisecond, "counter in %s did not pass %d", b.Dir, min)
}
