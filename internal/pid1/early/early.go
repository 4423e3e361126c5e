package early

import (
	"os"
	"os/signal"
	"syscall"
)

// ChildEnv is the environment variable that marks the child of the built-in init
// (pid1.ChildEnv): the child is not PID 1 and catches nothing here.
const ChildEnv = "DRAINKIT_PID1_CHILD"

var caught chan os.Signal

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

// Signals returns the channel on which every signal but SIGURG and SIGCHLD has been
// caught since this package was initialised, in PID 1 of a PID namespace that is not the built-in init's child,
// and nil in any other process.
func Signals() chan os.Signal { return caught }
