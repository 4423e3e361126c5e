package runsc

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
)

// ImageFile is the file runsc checkpoint writes in its image directory.
const ImageFile = "checkpoint.img"

// SavedRunning reports whether the checkpoint image in imageDir holds a task of the
// workload that had not begun to exit when gVisor saved it: a workload caught running.
//
// A checkpoint that reaches a sandbox whose workload is exiting (its init ended, the
// sandbox not yet gone: a few milliseconds) succeeds, and its image (about 11 KB, where
// a running counter's is about 220 KB) holds the exiting tasks alone, which a restore
// ends at once: nothing was saved that runs. gVisor saves each task with its run state,
// whose type the image names: runApp and the others for a task that runs, and runExit,
// runExitMain, runExitNotify on the exit path (pkg/sentry/kernel/task_exit.go). So an
// image that names a run state outside the exit path is true; one that names only exit
// states is false. The image is read as runsc writes it: the statefile header, its JSON
// metadata, 32 bytes of HMAC (runsc 20221219; newer runsc writes none without a key),
// then the data, in flate-compressed chunks each after its length, after the chunk size
// (runsc 20221219's only format, and "flate-best-speed"), or as it is (compression
// "none", newer runsc's default since 2026-04-28). It is read a chunk at a time, and
// only up to the first running task or the memory file's state, saved after the
// kernel's (named as each runsc names it: runState): the tasks come before the
// workload's memory, which is not read. An image that ends before the memory file's
// state is cut short, or holds none (its memory in pages files beside it, or its state
// a protocol buffer that names no type): whether it ended is not known, and it is an
// error. An image it cannot read so, or that names no run state, is an error: whether
// anything ran is not known.
func SavedRunning(imageDir string) (bool, error) {
	f, err := os.Open(filepath.Join(imageDir, ImageFile))
	if err != nil {
		return false, fmt.Errorf("runsc image: %w", err)
	}
	defer f.Close()
	running, err := savedRunning(f)
	if err != nil {
		return false, fmt.Errorf("runsc image %s: %w", imageDir, err)
	}
	return running, nil
}

// savedRunning is SavedRunning of the image r reads.
func savedRunning(r io.Reader) (bool, error) {
	chunks, err := imageChunks(bufio.NewReader(r))
	if err != nil {
		return false, err
	}
	exiting, err := scanRunStates(chunks)
	return !exiting && err == nil, err
}

// statefileMagic begins every gVisor state file.
var statefileMagic = []byte("gVisorSF")

// hmacSize is the size of the HMAC that follows a keyed image's metadata.
const hmacSize = 32

// maxChunk bounds a chunk's size, for an image that is not what it seems.
const maxChunk = 64 << 20

// imageChunks reads an image's header and metadata from r and returns the function that
// returns its chunks, decompressed, one a call, and io.EOF after the last.
func imageChunks(r *bufio.Reader) (func() ([]byte, error), error) {
	flated, err := imageData(r)
	if err != nil {
		return nil, err
	}
	if !flated {
		return func() ([]byte, error) { return nextPiece(r) }, nil
	}
	return func() ([]byte, error) { return nextChunk(r) }, nil
}

// imageData reads an image's header and metadata from r, and a compressed image's HMAC
// and chunk size, leaving r at the image's data, and reports whether the data is in flate
// chunks (else as gVisor saved it).
func imageData(r *bufio.Reader) (flated bool, err error) {
	var head [16]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return false, fmt.Errorf("header: %w", err)
	}
	if !bytes.Equal(head[:8], statefileMagic) {
		return false, errors.New("not a gVisor state file (bad magic)")
	}
	n := binary.BigEndian.Uint64(head[8:])
	if n > maxChunk {
		return false, fmt.Errorf("metadata of %d bytes", n)
	}
	meta := make([]byte, n)
	if _, err := io.ReadFull(r, meta); err != nil {
		return false, fmt.Errorf("metadata: %w", err)
	}
	var m map[string]string
	if err := json.Unmarshal(meta, &m); err != nil {
		return false, fmt.Errorf("metadata: %w", err)
	}
	switch c := m["compression"]; c {
	case "", "flate-best-speed":
	case "none":
		// The data as gVisor saved it, after the metadata: runsc's default since
		// 2026-04-28. Read as flate, every such image was one it could not read,
		// and taken as made (docs/faults.md row 1780).
		return false, nil
	default:
		return false, fmt.Errorf("compression %q: not one runsc writes (flate-best-speed, none)", c)
	}
	hash, err := keyed(r)
	if err != nil {
		return false, err
	}
	if _, err := r.Discard(hash + 4); err != nil { // the HMAC, then the chunk size
		return false, fmt.Errorf("chunk size: %w", err)
	}
	return true, nil
}

// keyed returns the size of the HMAC after the metadata: hmacSize when the chunk size
// (1 MiB in runsc) follows it, 0 when it follows the metadata at once.
func keyed(r *bufio.Reader) (int, error) {
	peek, err := r.Peek(hmacSize + 4)
	if err != nil {
		return 0, fmt.Errorf("chunk size: %w", err)
	}
	for _, h := range []int{hmacSize, 0} {
		if size := binary.BigEndian.Uint32(peek[h:]); size > 0 && size <= maxChunk && size&(size-1) == 0 {
			return h, nil
		}
	}
	return 0, errors.New("no chunk size after the metadata")
}

// nextChunk reads one chunk (its length, then its flate data) and returns it
// decompressed; io.EOF at the image's end.
func nextChunk(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err // io.EOF: the last chunk was read
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxChunk {
		return nil, fmt.Errorf("chunk of %d bytes", size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("chunk: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(data)), maxChunk))
	if err != nil {
		return nil, fmt.Errorf("chunk: %w", err)
	}
	return out, nil
}

// nextPiece reads up to a chunk's worth of an uncompressed image's data; io.EOF at the
// image's end. Type names are whole in what a piece holds, or cut by its end, which
// scanRunStates reads with the next piece's start: gVisor's statefile writes each
// string of its state in one write, framed or not (runsc before 2026-03-16 put a
// length before each write, which the scan reads over).
func nextPiece(r *bufio.Reader) ([]byte, error) {
	piece := make([]byte, 1<<20)
	n, err := io.ReadFull(r, piece)
	if n > 0 {
		return piece[:n], nil
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return nil, err
}

// runState matches the type name of a task's run state in a saved kernel (its
// submatch, the state's name), or that of the memory file's state, which is saved
// after the kernel's (no submatch): what follows it is the workload's memory. gVisor
// has named the memory file's state usageSet (runsc 20221219), then, since its sets
// were split (2024-06-28), unwasteSet, the first it saves, then memoryFileSaved
// (2026-01 to 2026-08); since, it saves it as a protocol buffer, which names no type,
// and where the memory goes to pages files beside the image (compression none), the
// image holds no memory file's state at all: such an image whose tasks all exit is an
// error, not one that ended (no end is known to have been read).
var runState = regexp.MustCompile(`pkg/sentry/(?:kernel\.run([A-Z][A-Za-z]*)|pgalloc\.(?:usageSet|unwasteSet|memoryFileSaved))`)

// scanRunStates reads chunks until it finds a run state outside the exit path, or the
// memory file's state, and returns whether it found exit states alone (true) or one
// outside it (false); an error when it found none. A name cut by a chunk's end is read
// with the next chunk's start. It reads no further than the memory file's state: the
// tasks are the kernel's, saved before it, and read to the image's end, a workload's
// memory still mapped as it exited (runExit) was decompressed to the last page, on
// Pause's path and Resume's (docs/faults.md row 1491). An image that ends before it
// found a running task or the memory file's state is an error: it was cut short.
func scanRunStates(next func() ([]byte, error)) (exiting bool, err error) {
	var tail []byte
	found := false
	for {
		chunk, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, err
		}
		buf := append(tail, chunk...)
		for _, m := range runState.FindAllSubmatch(buf, -1) {
			switch {
			case m[1] == nil: // the memory file's state: no task after it
				return scanned(found)
			case !bytes.HasPrefix(m[1], []byte("Exit")):
				return false, nil // a task that runs
			}
			found = true
		}
		tail = append([]byte(nil), buf[max(0, len(buf)-64):]...)
	}
	if found {
		// Cut short at a chunk's end: the tasks cut off may run. Taken for
		// exiting tasks alone, the sandbox was removed as dead, its image
		// with it (docs/faults.md row 1492).
		return false, errors.New("the image ends before the memory file's state (pkg/sentry/pgalloc's, saved after the kernel's): cut short, " +
			"or written by a runsc that saves none in it (newer than 2026-08, or its memory in pages files beside it): its other tasks not known")
	}
	return scanned(found)
}

// scanned is scanRunStates' answer once no task is left to read: exiting when it found
// a run state (all on the exit path), an error when it found none.
func scanned(found bool) (exiting bool, err error) {
	if !found {
		return false, errors.New("no task's run state in it")
	}
	return true, nil
}

// imageCut returns why the image in imageDir is cut short, its save ended before the end
// (its sandbox killed mid-save: 203 bytes, its header alone, measured with runsc
// 20221219), or nil when it is not known to be: its header, its metadata or a compressed
// image's chunk framing ends early, or no data follows its header; a missing image is cut
// too. An image of a format not read here, or whose data is as gVisor saved it past its
// first byte, is not known cut. A compressed image's chunks are read over, not
// decompressed: it reads the whole file, but decompresses nothing.
func imageCut(imageDir string) error {
	f, err := os.Open(filepath.Join(imageDir, ImageFile))
	if err != nil {
		return fmt.Errorf("no image: %w", err)
	}
	defer f.Close()
	return cutShort(bufio.NewReader(f))
}

// cutShort is imageCut of the image r reads.
func cutShort(r *bufio.Reader) error {
	flated, err := imageData(r)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("cut short in its header: %w", err)
	case err != nil:
		return nil // not a format read here
	}
	if _, err := r.Peek(1); errors.Is(err, io.EOF) {
		return errors.New("cut short: no data after its header")
	}
	for read := 0; flated; read++ {
		var n [4]byte
		if k, err := io.ReadFull(r, n[:]); errors.Is(err, io.EOF) {
			return nil // the last chunk was whole
		} else if err != nil {
			return fmt.Errorf("cut short after %d chunks, in a chunk's length (%d of 4 bytes): %w", read, k, err)
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxChunk {
			return nil // not a framing read here
		}
		if k, err := r.Discard(int(size)); err != nil {
			return fmt.Errorf("cut short after %d chunks, in a chunk (%d of %d bytes): %w", read, k, size, err)
		}
	}
	return nil
}
