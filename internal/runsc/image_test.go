//go:build linux

package runsc

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"slices"
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

	running, err = SavedRunning(runningCounterCheckpoint(t))
	require.NoError(t, err)
	assert.True(t, running, "a counter that runs")
}

// runningCounterCheckpoint checkpoints a counter that runs on the real runsc and
// returns the directory of its image.
func runningCounterCheckpoint(t *testing.T) string {
	t.Helper()
	rt := realRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b, err := WriteBundle(filepath.Join(dir, "b"), CounterArgs())
	require.NoError(t, err)
	require.NoError(t, rt.Run(ctx, containerID("counts"), b, filepath.Join(dir, "log")))
	waitCounter(t, b, 0)
	img := filepath.Join(dir, "img")
	require.NoError(t, rt.Checkpoint(ctx, containerID("counts"), img))
	return img
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

// withMemory returns the real image of testdata/caught-exiting followed by n
// chunks more of the workload's memory (1 MiB of zero pages each), as a
// workload whose memory was still mapped when its checkpoint caught it exiting
// (runExit) leaves after the kernel's state.
func withMemory(t *testing.T, n int) []byte {
	t.Helper()
	img, err := os.ReadFile(filepath.Join("testdata", "caught-exiting", ImageFile))
	require.NoError(t, err)
	var chunk bytes.Buffer
	w, err := flate.NewWriter(&chunk, flate.BestSpeed)
	require.NoError(t, err)
	_, err = w.Write(make([]byte, 1<<20))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	for range n {
		img = binary.BigEndian.AppendUint32(img, uint32(chunk.Len()))
		img = append(img, chunk.Bytes()...)
	}
	return img
}

// A countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// The scan of an image whose tasks all exit stops where the memory file's
// state begins (pkg/sentry/pgalloc.usageSet, saved after the kernel's, the
// tasks with it): what follows is the workload's memory, no task. Fault: it
// read the image to its end, decompressing every chunk of memory, on Pause's
// path and Resume's: of an image with 256 MiB of memory after its tasks it
// read every byte, where of one with 1 MiB it read 1 MiB less; now the same.
func TestSavedRunningStopsAtTheWorkloadsMemory(t *testing.T) {
	read := func(img []byte) int {
		r := &countingReader{r: bytes.NewReader(img)}
		running, err := savedRunning(r)
		require.NoError(t, err)
		require.False(t, running, "only exiting tasks were saved")
		return r.n
	}
	small, large := read(withMemory(t, 1)), read(withMemory(t, 256))
	assert.Equal(t, small, large, "the memory after the tasks was read")
}

// An image cut short at a chunk's end (a copy or a disk that lost its tail)
// with exit states in what is left says nothing of the tasks that were cut
// off: it is an error, where SavedRunning said the workload was caught
// exiting, and Runsc.Resume removed the sandbox, its record and its image,
// as one that died, no fault. The real image is written again in two chunks
// (gVisor's are 1 MiB, and a kernel's state may take several), split before
// the memory file's state, and the second dropped.
func TestSavedRunningOfAnImageCutAtAChunksEndIsAnError(t *testing.T) {
	img, err := os.ReadFile(filepath.Join("testdata", "caught-exiting", ImageFile))
	require.NoError(t, err)
	const head = 16 + 151 + hmacSize + 4 // magic and length, metadata, HMAC, chunk size
	next, err := imageChunks(bufio.NewReader(bytes.NewReader(img)))
	require.NoError(t, err)
	state, err := next()
	require.NoError(t, err)
	cut := bytes.Index(state, []byte("pkg/sentry/pgalloc.usageSet"))
	require.Greater(t, cut, bytes.Index(state, []byte("pkg/sentry/kernel.runExitNotify")), "the tasks come first")
	var chunk bytes.Buffer
	w, err := flate.NewWriter(&chunk, flate.BestSpeed)
	require.NoError(t, err)
	_, err = w.Write(state[:cut])
	require.NoError(t, err)
	require.NoError(t, w.Close())
	cutShort := binary.BigEndian.AppendUint32(slices.Clone(img[:head]), uint32(chunk.Len()))
	cutShort = append(cutShort, chunk.Bytes()...)
	_, err = savedRunning(bytes.NewReader(cutShort))
	require.ErrorContains(t, err, "ends before")
}

// A save killed mid-way leaves its image cut short: its header alone (203 bytes, the
// measured kill), or a chunk cut off; a whole image, its chunks all there, is not cut,
// nor one of a format not read here.
func TestImageCutShortIsToldFromAWholeOne(t *testing.T) {
	whole := withMemory(t, 2)
	const head = 16 + 151 + hmacSize + 4 // magic and length, metadata, HMAC, chunk size
	for name, c := range map[string]struct {
		img []byte
		cut string
	}{
		"whole":                 {whole, ""},
		"the real image, whole": {withMemory(t, 0), ""},
		"its header alone":      {whole[:head], "no data after its header"},
		"cut in the HMAC":       {whole[:16+151+10], "cut short in its header"},
		"cut in its last chunk": {whole[:len(whole)-100], "in a chunk ("},
		"cut in a chunk length": {whole[:len(withMemory(t, 1))+2], "in a chunk's length (2 of 4 bytes)"},
		"not a state file":      {[]byte("not gVisor at all"), ""},
	} {
		err := cutShort(bufio.NewReader(bytes.NewReader(c.img)))
		if c.cut == "" {
			assert.NoError(t, err, name)
			continue
		}
		assert.ErrorContains(t, err, c.cut, name)
	}
	assert.ErrorContains(t, imageCut(t.TempDir()), "no image")
}
