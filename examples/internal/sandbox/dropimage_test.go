//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/internal/runsc/runsctest"
)

// usedBytes is what the volume of dir has in use.
func usedBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

// Fault (a review of row 3101): a resumed runsc sandbox kept its checkpoint image on the
// images volume (Runsc had no DropImage, the fake's way to remove it once the record that
// names it is gone) until its next checkpoint or its delete: nothing will ever restore
// it, and on a volume with room for one image the next sandbox's checkpoint failed for
// want of space, which stops the sandbox: lost.
//
//	0          a and b run; the images volume has room for 1.5 of a's image
//	           a paused and resumed: its record removed
//	           before: its image stays (the volume two-thirds full); after: removed
//	           b paused: before: no space left on device, b lost; after: paused
func TestResumedRunscSandboxLeavesNoImageToFillTheVolume(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	b := runningCounter(t, ctx, n, rt)
	runsctest.ImagesVolume(t, filepath.Join(rt.Dir, "images"), 0, "size=256m", "a small images volume")
	images := filepath.Dir(rt.Image(a.ID))

	empty := usedBytes(t, images)
	_, err := n.Pause(ctx, a.ID)
	require.NoError(t, err)
	_, err = n.Resume(ctx, a.ID)
	require.NoError(t, err)
	_, err = os.Stat(rt.Image(a.ID))
	assert.ErrorIs(t, err, os.ErrNotExist, "a resumed sandbox's image is removed once its record is")
	// The restored sandbox holds its image, removed, open a moment after
	// runsc restore returns: the space is the volume's once it closes it.
	// Without the fix it never is, and this fails.
	require.Eventually(t, func() bool { return usedBytes(t, images) == empty }, 10*time.Second, 10*time.Millisecond,
		"the space of a's image given back once a runs again")

	checkpointFindsRoom(t, ctx, n, rt, b.ID, empty)
	st, err := rt.Runtime.State(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Status, "a runs on without its image")
	waitCount(t, rt.Bundle(a.ID), mustCounter(t, rt.Bundle(a.ID))+1)
}

// mustCounter returns the counter in bundle b.
func mustCounter(t *testing.T, b runsc.Bundle) int {
	t.Helper()
	c, err := b.Counter()
	require.NoError(t, err)
	return c
}
