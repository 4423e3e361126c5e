//go:build linux

package lastreport

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// writerEnv makes the test binary a process that writes the account to the file the
// variable names with Write, over and over, as a Progress rewrites it, until it is
// killed; it exits 1 when a write fails.
const writerEnv = "LASTREPORT_TEST_WRITER"

func TestMain(m *testing.M) {
	if path := os.Getenv(writerEnv); path != "" {
		account := bytes.Repeat([]byte("x"), 4<<20) // a long write: a kill is likely to land in it
		for {
			if err := Write(path, account, 0o600, nil); err != nil {
				os.Exit(1)
			}
		}
	}
	goleak.VerifyTestMain(m)
}

// fullDir returns a directory on a 256 KiB tmpfs of its own holding earlier at name
// (none when nil) and a filler that takes all the space left; it skips the test where a
// mount needs root.
func fullDir(t *testing.T, name string, earlier []byte) string {
	t.Helper()
	dir := lastreporttest.Tmpfs(t, "256k")
	if earlier != nil {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), earlier, 0o600))
	}
	lastreporttest.FillUp(t, filepath.Join(dir, "filler"))
	return dir
}

// On a full file system a Report as large as the earlier one, or smaller, is written in
// the space the earlier one freed: the drain's Report is there, not another's.
func TestWriteOnAFullFileSystemTakesTheEarlierReportsSpace(t *testing.T) {
	dir := fullDir(t, "r.json", bytes.Repeat([]byte("e"), 8192))
	path := filepath.Join(dir, "r.json")
	var log bytes.Buffer
	data := bytes.Repeat([]byte("n"), 6000)
	require.NoError(t, Write(path, data, 0o600, slog.New(slog.NewTextHandler(&log, nil))))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.Contains(t, log.String(), "level=WARN")
	assert.Contains(t, log.String(), "the Report written in the space of an earlier shutdown's")
}

// A Report larger than the space the earlier one freed is not written: the earlier one
// is gone all the same, the error is the write's, and the log says it at ERROR.
func TestWriteThatDoesNotFitLeavesNoEarlierReport(t *testing.T) {
	dir := fullDir(t, "r.json", []byte(`{"preserved": 4}`))
	path := filepath.Join(dir, "r.json")
	var log bytes.Buffer
	err := Write(path, bytes.Repeat([]byte("n"), 3*4096), 0o600, slog.New(slog.NewTextHandler(&log, nil)))
	require.ErrorIs(t, err, syscall.ENOSPC)
	assert.NoFileExists(t, path, "an earlier shutdown's Report, taken for this one's")
	assert.Contains(t, log.String(), `level=ERROR msg="the Report could not be written: an earlier shutdown's removed`)
	entries, rerr := os.ReadDir(dir)
	require.NoError(t, rerr)
	assert.Len(t, entries, 1, "the filler alone, no temporary file: %v", entries)
}

// With no earlier Report, or a directory where the file goes (a volume mounted there),
// Write returns the write's error and removes nothing.
func TestWriteWithNoEarlierReportRemovesNothing(t *testing.T) {
	dir := fullDir(t, "", nil)
	path := filepath.Join(dir, "r.json")
	require.ErrorIs(t, Write(path, []byte("{}"), 0o600, nil), syscall.ENOSPC)
	assert.NoFileExists(t, path)

	require.NoError(t, os.Mkdir(path, 0o755))
	err := Write(path, []byte("{}"), 0o600, nil)
	require.Error(t, err)
	assert.DirExists(t, path)
}

// On a read-only file system the earlier Report cannot be removed either: the error says
// the file there is an earlier shutdown's, so that no one takes it for this drain's.
func TestWriteOnAReadOnlyFileSystemSaysTheFileIsAnEarlierShutdowns(t *testing.T) {
	dir := fullDir(t, "r.json", []byte(`{"preserved": 4}`))
	require.NoError(t, syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	path := filepath.Join(dir, "r.json")
	err := Write(path, []byte("{}"), 0o600, nil)
	require.ErrorIs(t, err, syscall.EROFS)
	assert.ErrorContains(t, err, path+" is an earlier shutdown's Report, not this one's, and removing it failed too")
	assert.FileExists(t, path)
}
