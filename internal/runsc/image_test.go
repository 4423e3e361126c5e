package runsc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testdata/caught-exiting is the image of a real checkpoint (runsc 20221219, ptrace) that
// reached its sandbox as its workload exited on a SIGTERM sent 8 ms after the checkpoint
// began: it succeeded with 11,894 bytes, which name the run state runExitNotify alone, and
// restore as a sandbox that stops at once. A running counter's image names runApp.
func TestSavedRunningTellsAWorkloadCaughtExitingFromOneThatRuns(t *testing.T) {
	running, err := SavedRunning(filepath.Join("testdata", "caught-exiting"))
	require.NoError(t, err)
	assert.False(t, running, "only exiting tasks were saved")

	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), CounterArgs())
	require.NoError(t, err)
	require.NoError(t, rt.Run(ctx, "counts", b, filepath.Join(dir, "log")))
	waitCounter(t, b, 0)
	img := filepath.Join(dir, "img")
	require.NoError(t, rt.Checkpoint(ctx, "counts", img))
	running, err = SavedRunning(img)
	require.NoError(t, err)
	assert.True(t, running, "a counter that runs")
}

// An image SavedRunning cannot read is an error, never a workload said exited.
func TestSavedRunningOfWhatIsNoImageIsAnError(t *testing.T) {
	dir := t.TempDir()
	_, err := SavedRunning(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ImageFile), []byte("gVisorSF\x00\x00\x00\x00\x00\x00\x00\x02{}"), 0o600))
	_, err = SavedRunning(dir)
	require.ErrorContains(t, err, "chunk size")
	// The real image cut after its metadata: no chunk, no run state.
	real, err := os.ReadFile(filepath.Join("testdata", "caught-exiting", ImageFile))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ImageFile), real[:16+151+32+4], 0o600))
	_, err = SavedRunning(dir)
	require.ErrorContains(t, err, "no task's run state")
}
