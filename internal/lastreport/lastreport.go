package lastreport

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/drainkit/drainkit/internal/durable"
)

// Write writes data, a drain's Report, to path atomically and durably (durable.WriteFile,
// perm before the umask). When it cannot, the file an earlier shutdown left at path is
// removed (removing needs no space), which left was taken for this drain's Report; on a
// full file system (ENOSPC) data is then written once more in the space it freed, as
// large or nearly, and Write returns nil, logged at WARN. Otherwise it returns the
// write's error, logged at ERROR with the removal; the error also says when the earlier
// Report could not be removed, and stays there. What is at path and no regular file (a
// directory mounted there) is left alone. logger takes the lines; nil is
// slog.Default().
func Write(path string, data []byte, perm os.FileMode, logger *slog.Logger) error {
	return write(path, data, perm, logger, report)
}

// The nouns of write's lines: what data is.
const (
	report  = "the Report"
	account = "this drain's account" // a Progress's, at the drain's start (docs/faults.md row 1612)
)

// write is Write, its lines saying what data is (report or account).
func write(path string, data []byte, perm os.FileMode, logger *slog.Logger, what string) error {
	werr := durable.WriteFile(path, data, perm)
	if werr == nil {
		return nil
	}
	if logger == nil {
		logger = slog.Default()
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return werr // none, or not a Report
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("%w; %s is an earlier shutdown's Report, not this one's, and removing it failed too: %v", werr, path, err)
	}
	// On a full file system the space the earlier Report held is what this one needs.
	if errors.Is(werr, syscall.ENOSPC) && durable.WriteFile(path, data, perm) == nil {
		logger.Warn(what+" written in the space of an earlier shutdown's"+reportOf(what)+", removed first: the file system is full",
			"file", path, "error", werr)
		return nil
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		logger.Warn("an earlier shutdown's Report removed, but not durably: a crash may bring it back", "file", path, "error", err)
	}
	logger.Error(what+" could not be written: an earlier shutdown's"+reportOf(what)+" removed, so it is not taken for this one's", "file", path, "error", werr)
	return werr
}

// reportOf names the earlier shutdown's Report in a line of what, which says "the
// Report" itself.
func reportOf(what string) string {
	if what == report {
		return ""
	}
	return " Report"
}
