//go:build unix

package signame

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Name is sig as a person writes it: "SIGTERM", not "terminated"; a
// signal the platform does not name is its String.
func Name(sig os.Signal) string {
	if n, ok := sig.(syscall.Signal); ok {
		if s := unix.SignalName(n); s != "" {
			return s
		}
	}
	return sig.String()
}
