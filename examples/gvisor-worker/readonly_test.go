//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/internal/runsc/runsctest"
)

// Fault (a measurement of real runsc on a read-only image directory): on a read-only
// images volume (ext4's errors=remount-ro after a disk error, a hostPath remounted
// read-only) no checkpoint can begin: Pause fails in milliseconds, the sandbox running.
// The Preserver took that for a passing failure and tried again, for the whole preserve
// phase, so the sandbox got its SIGTERM only at the phase's deadline, with the escalate
// step's reserve left for its actor to save itself, where the time before was there for
// it. A volume that is read-only stays so through a drain: the failure is for good, and
// the sandbox is signalled as soon as the Preserver has given up.
//
//	0          the drain begins; the images volume is read-only
//	+0.0x s    the checkpoint fails: EROFS, the sandbox runs
//	           (before: tried again until the preserve deadline, +4.5 s)
//	soon after SIGTERM, while most of the grace is left
func TestSandboxesOnAReadOnlyImagesVolumeAreSignalledAtOnce(t *testing.T) {
	rep, lines, id := drainOnImagesVolume(t, syscall.MS_RDONLY, "size=1m", "a read-only images volume")
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	pre := rep.Phase(drain.PhasePreserve)
	t.Logf("entry %s after %d attempts, ended +%v: %s", e.Outcome, e.Attempts, e.End.Sub(rep.Start).Round(time.Millisecond), e.Error)
	t.Logf("preserve phase ended +%v (deadline +%v); escalate step +%v to +%v: %s %s",
		pre.End.Sub(rep.Start).Round(time.Millisecond), pre.Deadline.Sub(rep.Start).Round(time.Millisecond),
		esc.Start.Sub(rep.Start).Round(time.Millisecond), esc.Deadline.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	assert.Contains(t, e.Error, "read-only file system", "the Report names why")
	assert.Equal(t, 1, e.Attempts, "a checkpoint that cannot begin on a read-only volume was tried again")
	require.Contains(t, lines, "kill "+id+" 15", "no SIGTERM")
	assert.True(t, pre.End.Before(pre.Deadline), "the preserve phase held the sandbox to its deadline, +%v",
		pre.End.Sub(rep.Start).Round(time.Millisecond))
	assert.Equal(t, drain.OK, esc.Result, "the sandbox did not end on its SIGTERM in the time left: %s", esc.Error)
}

// drainOnImagesVolume drains one sandbox of a slow worker (earlyGrace: the preserve
// deadline at +4.5 s; one checkpoint at a time) whose images directory is a tmpfs mounted
// with flags and data, as SIGTERM would, and returns the drain's Report, the fake runsc's
// calls since its start and the sandbox's ID. Mounting what needs root: without it the
// test is skipped saying so.
func drainOnImagesVolume(t *testing.T, flags uintptr, data, what string) (rep *drain.Report, lines []string, id string) {
	t.Helper()
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	cfg.Concurrency = 1
	w, _, stop, d, ids := slowWorker(t, cfg, 1)
	runsctest.ImagesVolume(t, filepath.Dir(w.rt.(*sandbox.Runsc).Image(ids[0])), flags, data, what)
	rep = stop()
	return rep, d.calls(rep.Start), ids[0]
}

// Fault (row 3101, a review on a read-only images volume): a sandbox's timeout deletes it
// (runsc delete -force, then its bundle and image removed), and on a read-only images
// volume the removal failed after runsc had deleted the container: of the image a sandbox
// never checkpointed does not have (EROFS: the kernel refuses any unlink there before it
// looks the name up), and of the one a sandbox restored there keeps on disk (its removal
// at the resume, DropImage, refused too: row 3220). The delete failed: the worker listed
// the sandbox running, its container gone, and tried the delete again at every timeout, a
// WARN each.
//
//	0          Run, timeout 1 s (or 2 s, checkpointed, the volume read-only, restored);
//	           the images volume goes read-only
//	+1 s       the timeout: runsc deletes the container; its image stays where it is
//	           before: listed running for ever, its container gone; after: listed no
//	           more, what it left for the next worker's sweep
func TestTimeoutDeletesASandboxOnAReadOnlyImagesVolume(t *testing.T) {
	for name, restored := range map[string]bool{"never checkpointed": false, "restored from its image": true} {
		t.Run(name, func(t *testing.T) {
			var logs logbuf.Buffer
			w, c, _ := serveWorkerWith(t, runscConfig(t), slog.New(slog.NewTextHandler(&logs, nil)), nil)
			rs := w.rt.(*sandbox.Runsc)
			r, err := c.Run(context.Background(), &RunRequest{TimeoutS: 1})
			if restored {
				r, err = c.Run(context.Background(), &RunRequest{TimeoutS: 2})
				require.NoError(t, err)
				waitCount(t, rs.Bundle(r.ID), 2)
				_, err = c.Checkpoint(context.Background(), r.ID)
				require.NoError(t, err)
				readOnlyImages(t, rs)
				_, err = c.Restore(context.Background(), r.ID)
				require.FileExists(t, filepath.Join(rs.Image(r.ID), "checkpoint.img"), "a sandbox restored on a read-only volume keeps its image")
			} else {
				readOnlyImages(t, rs)
			}
			require.NoError(t, err)

			assert.Eventually(t, func() bool {
				_, err := rs.Runtime.State(context.Background(), r.ID)
				return errors.Is(err, runsc.ErrNotExist)
			}, 30*time.Second, 50*time.Millisecond, "the timeout did not delete the container")
			assert.Eventually(t, func() bool {
				list, err := c.List(context.Background())
				return err == nil && len(list.Sandboxes) == 0
			}, 10*time.Second, 50*time.Millisecond, "the deleted sandbox is still listed: %+v", w.node.List())
			assert.NotContains(t, logs.String(), "delete failed")
		})
	}
}

// readOnlyImages makes rs's images directory read-only (a read-only bind mount of itself)
// until the test ends.
func readOnlyImages(t *testing.T, rs *sandbox.Runsc) {
	t.Helper()
	images := filepath.Dir(rs.Image("x"))
	require.NoError(t, os.MkdirAll(images, 0o700))
	require.NoError(t, syscall.Mount(images, images, "", syscall.MS_BIND, ""), "bind-mounting the images volume needs root")
	t.Cleanup(func() { _ = syscall.Unmount(images, syscall.MNT_DETACH) })
	require.NoError(t, syscall.Mount("", images, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""), "remounting it read-only")
}
