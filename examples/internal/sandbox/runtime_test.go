//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/realpart"
	"github.com/drainkit/drainkit/internal/runsc"
	"github.com/drainkit/drainkit/pause"
)

// failImageSync makes the next n syncs of a checkpoint image fail with EIO, as a disk
// that lost the write does, until the test ends.
func failImageSync(t *testing.T, n int32) {
	left := atomic.Int32{}
	left.Store(n)
	syncImage = func(dir string) error {
		if left.Add(-1) >= 0 {
			return &os.PathError{Op: "fsync", Path: dir, Err: syscall.EIO}
		}
		return syncTree(dir)
	}
	t.Cleanup(func() { syncImage = syncTree })
}

// runningCounter starts a counter sandbox on n and waits until it has counted a few times.
func runningCounter(t *testing.T, ctx context.Context, n *Node, rt *Runsc) Info {
	t.Helper()
	a, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > 3 },
		30*time.Second, 20*time.Millisecond)
	return a
}

// A checkpoint whose image could not be made durable (its fsync failed: EIO, ENOSPC on a
// thin volume) had stopped the sandbox, yet Pause failed as if it still ran: the node said
// running, the Preserver's retry removed the image and failed to checkpoint a stopped
// container, and the drain counted lost a sandbox it had stopped itself, its image gone.
// Pause now restores the sandbox from its image when the image cannot be made durable: it
// runs on, as a failed Pause promises, and the retry checkpoints it.
func TestRunscPauseWhoseImageSyncFailsLeavesTheSandboxRunning(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)

	failImageSync(t, 1)
	_, err := n.Pause(ctx, a.ID)
	require.ErrorIs(t, err, syscall.EIO)
	st, err := rt.Runtime.State(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Status, "a Pause that failed leaves the sandbox running, as the node says")
	before, err := rt.Bundle(a.ID).Counter()
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > before+1 },
		30*time.Second, 20*time.Millisecond, "it counts on")

	// The drain's retry checkpoints it.
	p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 1})
	require.NoError(t, err)
	rep := p.Run(ctx, time.Now().Add(time.Minute))
	require.NoError(t, rep.Err(), "%+v", rep.Entries)
	assert.Equal(t, 1, rep.Counts[pause.Preserved])
	_, err = n.Resume(ctx, a.ID)
	require.NoError(t, err)
	saved, err := rt.Bundle(a.ID).Counter()
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > saved+1 },
		30*time.Second, 20*time.Millisecond)
	counts, err := rt.Bundle(a.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on through both checkpoints: %v", counts)
}

// When the sandbox whose image could not be made durable cannot be restored from it
// either, it is stopped with no durable image: Pause's error says so and is permanent,
// for a retry would remove that image and checkpoint a stopped container. The drain
// counts it failed (lost), naming why, after one attempt.
func TestRunscPauseWhoseImageSyncAndRestoreFailIsPermanent(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := runningCounter(t, ctx, n, rt)

	syncImage = func(dir string) error {
		// and the restore finds no bundle
		return errors.Join(&os.PathError{Op: "fsync", Path: dir, Err: syscall.EIO},
			os.Rename(rt.Bundle(a.ID).Dir, rt.Bundle(a.ID).Dir+".moved"))
	}
	t.Cleanup(func() { syncImage = syncTree })
	p, err := pause.New(pause.ListFunc(n.Running), pause.Config{Limit: 1})
	require.NoError(t, err)
	rep := p.Run(ctx, time.Now().Add(time.Minute))
	require.Len(t, rep.Entries, 1)
	e := rep.Entries[0]
	assert.Equal(t, pause.Failed, e.Outcome)
	assert.Equal(t, 1, e.Attempts, "not retried")
	assert.Contains(t, e.Error, "input/output error")
	assert.Contains(t, e.Error, "stopped")
	// The node says what it is: paused in an image no record names (not running, as it
	// said before), which a resume restores while this process lives.
	assert.Equal(t, []Info{{ID: a.ID, State: Paused, TimeoutS: a.TimeoutS}}, n.List())
	require.NoError(t, os.Rename(rt.Bundle(a.ID).Dir+".moved", rt.Bundle(a.ID).Dir))
	_, err = n.Resume(ctx, a.ID)
	require.NoError(t, err)
	saved, err := rt.Bundle(a.ID).Counter()
	require.NoError(t, err)
	require.Eventually(t, func() bool { c, err := rt.Bundle(a.ID).Counter(); return err == nil && c > saved+1 },
		30*time.Second, 20*time.Millisecond)
	counts, err := rt.Bundle(a.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "resumed where it stopped: %v", counts)
}

// watchSyncs records every path fsynced from now until the test ends, in order.
func watchSyncs(t *testing.T) func() []string {
	var mu sync.Mutex
	var synced []string
	syncPath = func(path string) error {
		mu.Lock()
		synced = append(synced, path)
		mu.Unlock()
		return fsync(path)
	}
	t.Cleanup(func() { syncPath = fsync })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := synced
		synced = nil
		return out
	}
}

// Fault (a review against real runsc): Pause fsynced the image's files and its directory,
// but not images/, whose new entry is what names that directory, and Create fsynced
// nothing of the bundle a restore needs: after a power loss the durable record could name
// an image, or need a bundle, that was never written. Both are now durable up to the
// runtime's directory, each directory after what it holds.
func TestImageAndBundleAreDurableUpToTheRuntimesDirectory(t *testing.T) {
	n, rt, _ := newRunscNode(t)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	synced := watchSyncs(t)

	a, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	bundle := rt.Bundle(a.ID).Dir
	assertSyncedInOrder(t, synced(), filepath.Join(bundle, "config.json"), filepath.Join(bundle, "rootfs", "bin", "busybox"),
		filepath.Join(bundle, "rootfs", "bin"), bundle, filepath.Dir(bundle), rt.Dir)

	_, err = n.Pause(ctx, a.ID)
	require.NoError(t, err)
	image := rt.Image(a.ID)
	files, err := os.ReadDir(image)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	assertSyncedInOrder(t, synced(), filepath.Join(image, files[0].Name()), image, filepath.Dir(image), rt.Dir)
}

// assertSyncedInOrder asserts that want were synced, each after the one before it.
func assertSyncedInOrder(t *testing.T, synced []string, want ...string) {
	t.Helper()
	at := -1
	for _, w := range want {
		i := slices.Index(synced, w)
		if !assert.GreaterOrEqual(t, i, 0, "%s never synced: %q", w, synced) {
			continue
		}
		assert.Greater(t, i, at, "%s synced before what comes before it: %q", w, synced)
		at = i
	}
}

// Fault (a review of row 381): the runtime's directory is new too on a node's first
// sandbox (NewRuntime gives stateDir/runsc, which Create's MkdirAll makes), and its own
// entry, in the state directory, was never fsynced: the bundle and then the image are
// durable up to it, the record beside it (stateDir/records) names the image, and a power
// loss could keep the record and lose the entry "runsc" that leads to the image. The
// chain of entries from the image to what was there before must be durable, this one
// included.
func TestTheRuntimesOwnNewDirectoryIsDurableByName(t *testing.T) {
	if err := runsc.Usable(); err != nil {
		realpart.Missing(t, "skipping real-runsc test: "+err.Error())
	}
	stateDir := t.TempDir()
	rt := NewRunsc(filepath.Join(stateDir, "runsc")) // as NewRuntime: not there yet
	t.Cleanup(func() { _ = rt.Runtime.DeleteAll(context.Background()) })
	st, err := store.Open(filepath.Join(stateDir, "records"))
	require.NoError(t, err)
	n, _, err := NewNode(rt, st, nil)
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	synced := watchSyncs(t)

	a, err := n.Create(ctx, 3600)
	require.NoError(t, err)
	_, err = n.Pause(ctx, a.ID)
	require.NoError(t, err)
	assert.Contains(t, synced(), stateDir, "the entry naming the runtime's new directory, %s, is never fsynced", rt.Dir)
}
