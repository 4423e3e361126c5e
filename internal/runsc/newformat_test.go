//go:build linux

package runsc

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stateOf returns the state data of an image runsc 20221219 wrote (flate chunks), every
// chunk decompressed: the bytes gVisor saved, before its statefile wrapped them.
func stateOf(t *testing.T, img []byte) []byte {
	t.Helper()
	next, err := imageChunks(bufio.NewReader(bytes.NewReader(img)))
	require.NoError(t, err)
	var state []byte
	for {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			return state
		}
		require.NoError(t, err)
		state = append(state, chunk...)
	}
}

// statefile writes state as gVisor's statefile does without a key (pkg/state/statefile,
// NewWriter): the magic, the metadata's length and the metadata, no HMAC, then the data:
// flate chunks, each after its length and after the chunk size (compression
// "flate-best-speed"), or the data as it is (compression "none", runsc's default since
// 2026-04-28, whose memory then goes to pages.img beside it).
func statefile(t *testing.T, compression string, state []byte) []byte {
	t.Helper()
	meta, err := json.Marshal(map[string]string{"compression": compression, "_timestamp": time.Now().String()})
	require.NoError(t, err)
	img := binary.BigEndian.AppendUint64([]byte("gVisorSF"), uint64(len(meta)))
	img = append(img, meta...)
	if compression == "none" {
		return append(img, state...)
	}
	img = binary.BigEndian.AppendUint32(img, 1<<20)
	for len(state) > 0 {
		n := min(len(state), 1<<20)
		var chunk bytes.Buffer
		w, err := flate.NewWriter(&chunk, flate.BestSpeed)
		require.NoError(t, err)
		_, err = w.Write(state[:n])
		require.NoError(t, err)
		require.NoError(t, w.Close())
		img = binary.BigEndian.AppendUint32(img, uint32(chunk.Len()))
		img = append(img, chunk.Bytes()...)
		state = state[n:]
	}
	return img
}

// memoryFileState is the name of the memory file's state, which gVisor saves after the
// kernel's, as runsc 20221219 writes it (the string's length, then the string), and
// named is how each runsc names it: usageSet until the memory file's sets were split
// (2024-06-28), unwasteSet first then, until 2026-01, then memoryFileSaved, until 2026-08.
var (
	memoryFileState = []byte("\x1bpkg/sentry/pgalloc.usageSet")
	named           = map[string][]byte{
		"usageSet":        memoryFileState,
		"unwasteSet":      []byte("\x1dpkg/sentry/pgalloc.unwasteSet"),
		"memoryFileSaved": []byte("\x22pkg/sentry/pgalloc.memoryFileSaved"),
	}
)

// Fault: runsc.SavedRunning read only the images of runsc 20221219 (flate chunks, the
// memory file's state named pgalloc.usageSet), and newer runsc writes others: since
// 2026-04-28 its default is compression "none" (the data after the metadata as it is),
// and since 2024-06-28 the memory file's state is named otherwise. Of each it said
// "cannot read" (compression "none": only flate images are read; "the image ends before
// the memory file's state": cut short), and the examples' Runsc.Pause took the image as
// made: a workload caught exiting was counted preserved, its resume "succeeding" with
// nothing running (row 1392's fault again on every newer runsc). The real images
// (testdata/caught-exiting, a running counter's checkpoint by the installed runsc) are
// written again as newer runsc writes them: each is read, and says the same as the
// original.
func TestSavedRunningReadsTheImagesNewerRunscWrites(t *testing.T) {
	exiting, err := os.ReadFile(filepath.Join("testdata", "caught-exiting", ImageFile))
	require.NoError(t, err)
	runs, err := os.ReadFile(filepath.Join(runningCounterCheckpoint(t), ImageFile))
	require.NoError(t, err)

	for name, img := range map[string][]byte{"caught exiting": exiting, "running": runs} {
		state := stateOf(t, img)
		require.Contains(t, string(state), string(memoryFileState), "runsc 20221219's name of the memory file's state")
		want := name == "running"
		for _, c := range []string{"none", "flate-best-speed"} {
			for marker, as := range named {
				data := bytes.Replace(state, memoryFileState, as, 1)
				t.Run(name+"/"+c+"/"+marker, func(t *testing.T) {
					running, err := savedRunning(bytes.NewReader(statefile(t, c, data)))
					require.NoError(t, err, "before: an error, and the image taken as made")
					assert.Equal(t, want, running)
				})
			}
		}
		// Compression "none" puts the memory file's state in pages_meta.img: the image
		// ends with the kernel's, and no end says its tasks are all there. A task
		// that runs says so; exit states alone are not known to be all.
		kernelOnly := statefile(t, "none", state[:bytes.Index(state, memoryFileState)])
		running, err := savedRunning(bytes.NewReader(kernelOnly))
		if want {
			require.NoError(t, err)
			assert.True(t, running)
		} else {
			require.ErrorContains(t, err, "pages files", "exit states alone, not known to be all")
		}
	}
}
