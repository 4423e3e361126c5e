//go:build unix

package startsig

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// name is sig as a person writes it: "SIGTERM", not "terminated".
func name(sig os.Signal) string {
	if n, ok := sig.(syscall.Signal); ok {
		if s := unix.SignalName(n); s != "" {
			return s
		}
	}
	return sig.String()
}
