//go:build unix

package learned

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// flock takes an exclusive flock(2) on f without waiting.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return errHeld
		}
		return err
	}
}
