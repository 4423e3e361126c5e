//go:build unix

package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// tryLock tries the exclusive flock of f without blocking: false when another open file
// holds it. (flock, not fcntl's POSIX locks, which closing any descriptor of the file in
// the process would release: reading the lock file to name the holder would have.)
func tryLock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		}
		return false, fmt.Errorf("state directory %s: flock: %w", filepath.Dir(f.Name()), err)
	}
}
