package durable

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// TempSuffix ends the name of WriteFile's temporary file, .NAME.RANDOM.tmp
// beside NAME. One found in a directory is a write that a crash
// interrupted, or one in progress: RemoveTemps removes them where no write
// can be, RemoveGoneTemps those no write in progress holds.
const TempSuffix = ".tmp"

// WriteFile writes data to path atomically and durably: it writes a
// temporary file .NAME.RANDOM.tmp beside path (created with perm before
// the umask, like os.WriteFile), fsyncs it, renames it over path and fsyncs
// the directory. After it returns nil, path holds data across a crash or
// power loss; a crash before that leaves path as it was (or, past the
// rename, holding data whole), and perhaps the temporary file. On an error it removes the temporary file; a path that
// is a directory is an error that says so. An error of the directory's
// fsync ("sync DIR: ...") comes after the rename: path then holds data,
// but a crash may still undo it, so a caller that undoes what the write
// was for must not take path for unchanged. WriteFiles of the same path
// may overlap (two processes sharing a directory): each temporary file is
// its own, and path holds one of the writes whole. The temporary file's
// flock(2) is held from its create past its rename (RemoveGoneTemps).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, name := filepath.Split(path)
	f, release, err := create(dir, name, perm)
	if err != nil {
		return err
	}
	defer release() // past the rename, or the removal: the file's name is gone
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameOver(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Clean(dir))
}

// renameOver renames tmp over path; its error says so when path is a
// directory, which rename(2) says only as "file exists" (EEXIST, or
// EISDIR), naming tmp first: a Report path made a directory by mistake,
// a hostPath mounted where a file was meant.
func renameOver(tmp, path string) error {
	err := os.Rename(tmp, path)
	if err != nil {
		if fi, serr := os.Lstat(path); serr == nil && fi.IsDir() {
			return fmt.Errorf("%s is a directory, which a file cannot replace: %w", path, err)
		}
	}
	return err
}

// MkdirAll creates dir and the parents it lacks, as os.MkdirAll does, and
// makes them durable: dir and each of its parents up to the root are
// fsynced, deepest first. A file written durably into a directory that a
// crash could undo is lost with it: the directory's own entry must reach
// the disk too, and one created by an earlier call whose fsync failed, or
// by another process not yet done, is no more durable for existing. A
// failed fsync of dir or of a directory this call created is the error;
// one of an older parent (the root of a read-only image, say) is not.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	created := map[string]bool{}
	for d := dir; ; d = filepath.Dir(d) {
		_, err := os.Lstat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		created[d] = true
		if d == filepath.Dir(d) {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	childCreated := false // the directory below d on the way up: its entry is in d
	for d := dir; ; d = filepath.Dir(d) {
		if err := syncDir(d); err != nil && (d == dir || created[d] || childCreated) {
			return err
		}
		childCreated = created[d]
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// RemoveTemps removes the temporary files that WriteFiles of path cut
// short by a crash left beside it (.NAME.RANDOM.tmp), which no later write
// reuses: each crash between a write's create and its rename (a SIGKILL
// during its fsync) leaves one more, for ever on a directory that outlives
// the process. It returns the paths it removed, and syncs the directory
// when it removed any. Call it only where no WriteFile of path can be in
// progress, as under a lock every writer of path takes: a write in flight
// would have its temporary file removed and fail. Other files, and the
// temporary files of other names, are left alone.
func RemoveTemps(path string) ([]string, error) {
	return removeTempsWith(path, removeTemp)
}

// removeTemp removes the temporary file p; one already gone counts as
// removed.
func removeTemp(p string) (bool, error) {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// RemoveGoneTemps removes the temporary files that WriteFiles of path left
// when their process ended between the write's create and its rename (a
// SIGKILL during its fsync), as RemoveTemps does, but anywhere, with no lock
// taken: a WriteFile holds its temporary file's flock from its create past its
// rename, and a file whose flock is held, a write in progress in this process
// or another, is left alone. It returns the paths it removed, and syncs the
// directory when it removed any. Where flock(2) does not exist it removes
// none.
func RemoveGoneTemps(path string) ([]string, error) {
	return removeTempsWith(path, removeIfGone)
}

// removeTempsWith calls remove on each temporary file of path's writes and
// returns the paths it removed, syncing the directory when it removed any;
// the two removers differ only in which files they may take.
func removeTempsWith(path string, remove func(p string) (bool, error)) ([]string, error) {
	dir, name := filepath.Split(path)
	dir = filepath.Clean(dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !isTemp(e.Name(), name) || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		gone, err := remove(p)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, p)
		}
	}
	if len(removed) > 0 {
		errs = append(errs, syncDir(dir))
	}
	return removed, errors.Join(errs...)
}

// isTemp reports whether entry is the name of a temporary file create
// made for name: "." + name + "." + base 36 digits + TempSuffix.
func isTemp(entry, name string) bool {
	rest, ok := strings.CutPrefix(entry, "."+name+".")
	if !ok {
		return false
	}
	random, ok := strings.CutSuffix(rest, TempSuffix)
	if !ok || random == "" {
		return false
	}
	_, err := strconv.ParseUint(random, 36, 32)
	return err == nil && strings.ToLower(random) == random
}

// syncDir is SyncDir; a test's hook watches it.
var syncDir = SyncDir

// create makes a new temporary file for name in dir, one no other write
// uses, and holds it (holdTemp) until release.
func create(dir, name string, perm os.FileMode) (f *os.File, release func(), err error) {
	for {
		tmp := filepath.Join(dir, "."+name+"."+strconv.FormatUint(uint64(rand.Uint32()), 36)+TempSuffix)
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if release, err = holdTemp(f); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, nil, err
		}
		if ours(f, tmp) {
			return f, release, nil
		}
		// A remover (RemoveGoneTemps) took it between its create and its hold,
		// unheld, for a write cut short: a new one.
		release()
		f.Close()
	}
}

// ours reports whether tmp still names f.
func ours(f *os.File, tmp string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Lstat(tmp)
	return err == nil && os.SameFile(held, now)
}

// SyncDir fsyncs dir, so that the entries created, renamed or removed in it
// are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
