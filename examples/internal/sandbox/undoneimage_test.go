//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/runsc/runsctest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault (a review of row 3220): a pause whose record could not be written (the records
// directory gone, a full state volume) is undone, the sandbox restored from its image and
// running on, as a failed Pause promises; but the image stayed on the images volume, as a
// resumed sandbox's did before row 3220: no record names it, nothing restores it, and it
// held its size of the volume until the sandbox's next checkpoint or delete. Another
// sandbox's checkpoint then failed for want of space, which stops that sandbox: lost.
// The undo now removes the image, as a Resume does once the record is gone.
//
//	0          a and b run; the images volume has room for 1.5 of a's image
//	           a paused: its image written, its record not (the records directory gone)
//	           the pause undone: a restored, running
//	           before: its image stays; after: removed
//	           b paused: before: no space left on device, b lost; after: paused
func TestPauseUndoneForItsRecordLeavesNoImageToFillTheVolume(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	b := runningCounter(t, ctx, n, rt)
	runsctest.ImagesVolume(t, filepath.Join(rt.Dir, "images"), 0, "size=256m", "a small images volume")
	images := filepath.Dir(rt.Image(a.ID))
	records := filepath.Join(filepath.Dir(images), "records")

	empty := usedBytes(t, images)
	require.NoError(t, os.RemoveAll(records))
	_, err := n.Pause(ctx, a.ID)
	require.Error(t, err, "a's record could not be written")
	require.NoError(t, os.MkdirAll(records, 0o700))
	require.ElementsMatch(t, []Info{{ID: a.ID, State: Running, TimeoutS: 3600}, {ID: b.ID, State: Running, TimeoutS: 3600}}, n.List(),
		"a's pause undone: it runs on")
	_, err = os.Stat(rt.Image(a.ID))
	assert.ErrorIs(t, err, os.ErrNotExist, "the image of a pause undone is removed: no record names it")
	// The restored sandbox lets go of the image's files a moment after its restore.
	assert.Eventually(t, func() bool { return usedBytes(t, images) == empty }, 10*time.Second, 10*time.Millisecond,
		"the images volume keeps a's image")
	t.Logf("in use after a's undone pause: %d bytes", usedBytes(t, images)-empty)

	checkpointFindsRoom(t, ctx, n, rt, b.ID, empty)
	waitCount(t, rt.Bundle(a.ID), mustCounter(t, rt.Bundle(a.ID))+1)
}

// checkpointFindsRoom shrinks the images volume of rt, empty bytes in use when it held no
// image, to room for 1.5 images of sandbox id, and pauses id: its checkpoint finds room
// only when no other image holds the volume.
func checkpointFindsRoom(t *testing.T, ctx context.Context, n *Node, rt *Runsc, id string, empty uint64) {
	t.Helper()
	images := filepath.Dir(rt.Image(id))
	before := usedBytes(t, images)
	_, err := n.Pause(ctx, id)
	require.NoError(t, err)
	image := usedBytes(t, images) - before
	require.Positive(t, image, "the image takes room")
	_, err = n.Resume(ctx, id)
	require.NoError(t, err)
	// The restored sandbox lets go of its image's files a moment after its restore.
	require.Eventually(t, func() bool { return usedBytes(t, images) == before }, 10*time.Second, 10*time.Millisecond,
		"the resume left its image")
	size := empty + image*3/2
	require.NoError(t, syscall.Mount("", images, "", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", size)),
		"the images volume shrunk to room for 1.5 images")
	t.Logf("%s's image %d bytes; the volume %d bytes, %d in use", id, image, size, usedBytes(t, images))
	_, err = n.Pause(ctx, id)
	require.NoError(t, err, "the checkpoint finds room for its image")
}

// Fault (a review of row 3220): a checkpoint whose image could not be made durable (its
// fsync failed) restores the sandbox from that image, running on, as a failed Pause
// promises; but the image stayed on the images volume: nothing names it, nothing restores
// it, and it held its size of the volume until the sandbox's next checkpoint or delete.
// Another sandbox's checkpoint then failed for want of space, which stops that sandbox:
// lost. Pause now removes it once the sandbox runs again from it.
//
//	0          a and b run; the images volume has room for 1.5 of b's image
//	           a paused: its image written, its fsync fails: a restored from it, running
//	           before: its image stays; after: removed
//	           b paused: before: no space left on device, b lost; after: paused
func TestPauseWhoseImageSyncFailedLeavesNoImageToFillTheVolume(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)
	b := runningCounter(t, ctx, n, rt)
	runsctest.ImagesVolume(t, filepath.Join(rt.Dir, "images"), 0, "size=256m", "a small images volume")
	images := filepath.Dir(rt.Image(a.ID))

	empty := usedBytes(t, images)
	failImageSync(t, 1)
	_, err := n.Pause(ctx, a.ID)
	require.ErrorIs(t, err, syscall.EIO)
	require.ElementsMatch(t, []Info{{ID: a.ID, State: Running, TimeoutS: 3600}, {ID: b.ID, State: Running, TimeoutS: 3600}}, n.List(),
		"a restored from its image: it runs on")
	_, err = os.Stat(rt.Image(a.ID))
	assert.ErrorIs(t, err, os.ErrNotExist, "the image a was restored from is removed: nothing names it")
	assert.Eventually(t, func() bool { return usedBytes(t, images) == empty }, 10*time.Second, 10*time.Millisecond,
		"the images volume keeps a's image")
	t.Logf("in use after a's failed pause: %d bytes", usedBytes(t, images)-empty)

	checkpointFindsRoom(t, ctx, n, rt, b.ID, empty)
	waitCount(t, rt.Bundle(a.ID), mustCounter(t, rt.Bundle(a.ID))+1)
}
