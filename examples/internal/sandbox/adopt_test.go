//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/runsc"
)

// A sandbox the server before this one marked as left checkpointing at its exit
// (MarkCheckpointsLeft), whose container this PID namespace's runsc does not know, was
// checkpointed in another PID namespace: a pod's, whose SIGKILL took the sandbox with its
// client, mid-save. What it wrote is no save to record, however whole it looks (a save
// cut between two of its writes ends on a whole chunk), and is swept as before the mark.
//
//	the last worker, in its pod: marks the sandbox, exits; SIGKILL ends the pod
//	this worker, in a new pod: an image, the mark, no container in its namespace
//	AdoptCheckpoints: nothing recorded; SweepOrphans: the image removed
func TestMarkedCheckpointOfAnotherPIDNamespaceIsSweptNotRecorded(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	id := "sb-0123456789ab"
	require.NoError(t, os.MkdirAll(rt.Bundle(id).Dir, 0o700))
	require.NoError(t, rt.markCheckpointLeft(id))
	require.NoError(t, os.MkdirAll(rt.Image(id), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(rt.Image(id), runsc.ImageFile), []byte("whole as far as can be told"), 0o600))
	records := filepath.Join(rt.Dir, "records")

	require.NoError(t, n.AdoptCheckpoints(context.Background(), records, 0, nil))
	assert.Empty(t, n.List(), "a save its namespace's end cut was recorded")
	n.SweepOrphans(records, nil)
	assert.NoDirExists(t, rt.Image(id))
	assert.NoDirExists(t, rt.Bundle(id).Dir)
}
