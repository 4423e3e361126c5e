//go:build unix

package durable

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// holdTemp takes the exclusive flock of f, a temporary file WriteFile just created,
// and holds it until release: from its create past its rename, so that a remover
// that takes it (removeIfGone) knows the write is over, cut short. The hold is on
// a duplicate of f's descriptor, so that f's Close, before the rename, does not end
// it. The kernel ends it when the process ends, SIGKILL included. A file system
// that refuses flock (ENOLCK, EOPNOTSUPP: some network and FUSE ones) gets its
// write all the same, unheld: a Report is worth more than its leftover's removal,
// and there a remover's flock fails too and removes nothing.
func holdTemp(f *os.File) (release func(), err error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	if err := flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return func() {}, nil
	}
	return func() { unix.Close(fd) }, nil
}

// removeIfGone removes the temporary file p when no write holds it (holdTemp): its
// writer ended between its create and its rename. It reports whether it removed p;
// a p already gone (renamed into place, or removed) is no error.
func removeIfGone(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil // a write in progress
	}
	if err != nil {
		return false, err
	}
	// Opened before its writer renamed it into place, the name may be gone since.
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	if now, err := os.Lstat(p); err != nil || !os.SameFile(held, now) {
		return false, nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// flock is flock(2) on fd, again when a signal interrupts it.
func flock(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
