package durable

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// writerEnv makes the test binary a process that writes the file the
// variable names with WriteFile, over and over, until it is killed.
const writerEnv = "DURABLE_TEST_WRITER"

func TestMain(m *testing.M) {
	if path := os.Getenv(writerEnv); path != "" {
		big := bytes.Repeat([]byte("x"), 4<<20) // a long write: a kill is likely to land in it
		for {
			if err := WriteFile(path, big, 0o600); err != nil {
				os.Exit(1)
			}
		}
	}
	goleak.VerifyTestMain(m)
}

// WriteFile replaces the file whole, with the mode asked for (before the
// umask), and leaves no temporary file behind; a write into a missing
// directory fails.
func TestWriteFileReplacesAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	require.NoError(t, WriteFile(path, []byte("first, and longer"), 0o600))
	require.NoError(t, WriteFile(path, []byte("second"), 0o600))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "second", string(data))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the file itself")

	assert.ErrorIs(t, WriteFile(filepath.Join(dir, "missing", "r.json"), []byte("x"), 0o600), os.ErrNotExist)
}

// A write that fails leaves the old file as it was and no temporary: here
// the rename fails, for path is a directory. The error says so, naming
// path: the rename's own said only "file exists", beside the name of a
// temporary file the write had just made.
func TestFailedWriteLeavesTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	require.NoError(t, os.Mkdir(path, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(path, "keep"), []byte("x"), 0o600))
	err := WriteFile(path, []byte("new"), 0o600)
	require.Error(t, err)
	assert.ErrorContains(t, err, path+" is a directory")
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	assert.ErrorContains(t, WriteFile(empty, []byte("new"), 0o600), empty+" is a directory")
	require.NoError(t, os.Remove(empty))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the old entry stays")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the temporary is removed")
}

// Writes that overlap (two servers on one state directory) each leave
// the file whole: one of the writes, never a mix, and no temporary.
func TestOverlappingWritesLeaveOneWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rates.json")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				assert.NoError(t, WriteFile(path, bytes.Repeat([]byte{'a' + byte(i)}, 4096*(i+1)), 0o600))
			}
		})
	}
	wg.Wait()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, data)
	assert.Equal(t, bytes.Repeat(data[:1], len(data)), data, "one write whole")
	assert.Equal(t, 4096*int(data[0]-'a'+1), len(data))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the file itself")
}

func TestSyncDirNamesAMissingDirectory(t *testing.T) {
	err := SyncDir(filepath.Join(t.TempDir(), "gone"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// MkdirAll fsyncs dir and every parent up to the root, deepest first,
// also when they exist: one an earlier call created and failed to fsync
// (or a crash stopped before it did) is synced by the next call, where
// before it synced nothing. A failed fsync of dir, or of a directory it
// created or whose child it created, is the error; of an older parent, not.
func TestMkdirAllSyncsTheWholeChain(t *testing.T) {
	root := t.TempDir()
	var synced []string
	syncDir = func(dir string) error { synced = append(synced, dir); return SyncDir(dir) }
	defer func() { syncDir = SyncDir }()
	chain := func(d string) []string {
		var c []string
		for ; ; d = filepath.Dir(d) {
			c = append(c, d)
			if d == filepath.Dir(d) {
				return c
			}
		}
	}

	dir := filepath.Join(root, "state", "records")
	require.NoError(t, MkdirAll(dir, 0o700))
	assert.DirExists(t, dir)
	assert.Equal(t, chain(dir), synced)

	synced = nil
	require.NoError(t, MkdirAll(dir+"/", 0o700))
	assert.Equal(t, chain(dir), synced, "existing: synced again")

	failing := func(bad string) func(string) error {
		return func(dir string) error {
			if dir == bad {
				return errors.New("sync " + dir + ": input/output error")
			}
			return nil
		}
	}
	syncDir = failing(filepath.Join(root, "new"))
	assert.ErrorContains(t, MkdirAll(filepath.Join(root, "new", "sub"), 0o700), "new: input/output error", "a directory it created")
	syncDir = failing(root)
	assert.ErrorContains(t, MkdirAll(filepath.Join(root, "other"), 0o700), "input/output error", "the parent of one it created")
	syncDir = failing(filepath.Dir(root))
	assert.NoError(t, MkdirAll(filepath.Join(root, "third"), 0o700), "an older parent's failure is not the call's")
}

// MkdirAll over a file fails as os.MkdirAll does.
func TestMkdirAllOverAFileFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	assert.Error(t, MkdirAll(filepath.Join(file, "dir"), 0o700))
}

// A writer SIGKILLed in the middle of its WriteFiles leaves the file whole
// and, most times, the temporary file of the write it was in, which no
// later write reuses; RemoveTemps removes it (and only files so named),
// syncing the directory, and leaves the file itself whole.
func TestRemoveTempsRemovesWhatAKilledWriterLeft(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "last-shutdown.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+path)
	require.NoError(t, cmd.Start())
	require.Eventually(t, func() bool { // one write whole, and the next begun
		entries, _ := os.ReadDir(dir)
		return len(entries) == 2
	}, 30*time.Second, time.Millisecond, "a hung writer, not a timing")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	keep := []string{".last-shutdown.json.ABC.tmp", ".last-shutdown.json..tmp", ".other.json.abc.tmp",
		"last-shutdown.json.abc.tmp", ".last-shutdown.json.abc"}
	for _, name := range keep {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".last-shutdown.json.dir1.tmp"), 0o700))
	left := filepath.Join(dir, ".last-shutdown.json.zz9"+TempSuffix) // another crash's
	require.NoError(t, os.WriteFile(left, []byte("half"), 0o600))

	var synced []string
	syncDir = func(dir string) error { synced = append(synced, dir); return SyncDir(dir) }
	defer func() { syncDir = SyncDir }()
	removed, err := RemoveTemps(path)
	require.NoError(t, err)
	assert.Contains(t, removed, left)
	assert.LessOrEqual(t, len(removed), 2, "the killed write's and the other crash's: %v", removed)
	assert.Equal(t, []string{dir}, synced, "the removals made durable")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, append(keep, ".last-shutdown.json.dir1.tmp", "last-shutdown.json"), names)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Len(t, data, 4<<20, "the file whole")

	synced = nil
	removed, err = RemoveTemps(path)
	require.NoError(t, err)
	assert.Empty(t, removed)
	assert.Empty(t, synced, "nothing removed, nothing to sync")
	_, err = RemoveTemps(filepath.Join(dir, "gone", "x"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// RemoveGoneTemps removes the temporary file of a write whose writer was
// SIGKILLed in it, and never one a write in progress holds (this process's,
// or another's: flock(2) conflicts between open files, not processes), nor
// other names; once that write's hold ends unrenamed (its process ended), the
// file goes too.
func TestRemoveGoneTempsLeavesAWriteInProgress(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+path)
	require.NoError(t, cmd.Start())
	var killed []string
	require.Eventually(t, func() bool {
		killed, _ = filepath.Glob(filepath.Join(dir, ".report.json.*"+TempSuffix))
		return len(killed) > 0
	}, 30*time.Second, time.Millisecond, "a hung writer, not a timing")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed, _ = filepath.Glob(filepath.Join(dir, ".report.json.*"+TempSuffix)) // none if the kill came past the rename

	f, release, err := create(dir, "report.json", 0o600)
	require.NoError(t, err)
	other := filepath.Join(dir, ".other.json.abc"+TempSuffix)
	require.NoError(t, os.WriteFile(other, nil, 0o600))

	removed, err := RemoveGoneTemps(path)
	require.NoError(t, err)
	assert.ElementsMatch(t, killed, removed, "the killed write's, not the one in progress")
	assert.FileExists(t, f.Name(), "the write in progress")
	assert.FileExists(t, other)

	require.NoError(t, f.Close())
	removed, err = RemoveGoneTemps(path)
	require.NoError(t, err)
	assert.Empty(t, removed, "closed, the file is still held until release: the hold outlives the Close before the rename")
	release()
	removed, err = RemoveGoneTemps(path)
	require.NoError(t, err)
	assert.Equal(t, []string{f.Name()}, removed)
}
