package runsc

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A runsc checkpoint client another process started (a server before this one, which
// exited with it running) is found by its arguments, for this Runtime's root and that
// container alone, and waited for until it ends; a wait whose context ends first says so.
func TestCheckpointClientsOfAContainerAreFoundAndWaitedFor(t *testing.T) {
	r := &Runtime{Root: t.TempDir()}
	cmd := exec.Command("sh", "-c", "sleep 60; :", "runsc", "--root="+r.Root, "--network=none", "checkpoint", "--image-path=/images/sb-1", "sb-1")
	require.NoError(t, cmd.Start())
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-ended })

	assert.Equal(t, []int{cmd.Process.Pid}, r.CheckpointClients("sb-1"))
	assert.Empty(t, r.CheckpointClients("sb-2"), "another container's")
	assert.Empty(t, (&Runtime{Root: t.TempDir()}).CheckpointClients("sb-1"), "another root's")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	found, err := r.AwaitCheckpointClients(ctx, "sb-1")
	assert.True(t, found)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, cmd.Process.Kill())
	_, err = r.AwaitCheckpointClients(context.Background(), "sb-1") // found or not: the kill may be reaped already
	require.NoError(t, err, "the wait did not end with the client")
	assert.Empty(t, r.CheckpointClients("sb-1"))
}
