//go:build linux

package sandbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fault (a review of row 3421): CloseWithin whose context had ended already said that
// deletes of sandboxes whose timeout passed still ran, naming none, when none was in
// progress: its wait for the timeouts raced the context, and the context, ended first,
// won. gvisor-worker closes its node so once its wait for the checkpoints its drain
// abandoned has given up, 250 ms before SIGKILL: its exit then logged an ERROR, "deletes
// of sandboxes whose timeout passed did not end before SIGKILL", and its error and
// termination message named deletes "[]" that had never begun.
//
//	a sandbox runs, its timeout an hour away: no delete in progress
//	the context ends
//	CloseWithin: before, an error naming deletes []; after, nil
func TestCloseWithinPastItsEndWithNoDeleteInProgressSaysNothingLeft(t *testing.T) {
	n, _ := newFakeNode(t, t.TempDir(), 0)
	_, err := n.Create(context.Background(), 3600)
	require.NoError(t, err)
	ended, end := context.WithCancel(context.Background())
	end()
	require.NoError(t, n.CloseWithin(ended), "no delete was in progress")
}
