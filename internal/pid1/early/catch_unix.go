//go:build unix

package early

import (
	"os"
	"os/signal"
	"syscall"
)

func init() {
	if os.Getpid() == 1 && os.Getenv(ChildEnv) == "" {
		caught = make(chan os.Signal, 64) // a burst until pid1's loop forwards
		// Not SIGURG, which the Go runtime sends itself to preempt goroutines while the
		// packages initialise, nor SIGCHLD, which pid1 asks for once it starts a child:
		// the buffer, which os/signal never blocks on, is kept for the signals to forward.
		var sigs []os.Signal
		for n := syscall.Signal(1); n <= 64; n++ {
			if n != syscall.SIGURG && n != syscall.SIGCHLD {
				sigs = append(sigs, n)
			}
		}
		signal.Notify(caught, sigs...)
	}
}
