// Package early catches every signal a namespace's PID 1 gets from the first moments of
// its Go program on, for the built-in init (internal/pid1) to forward once main calls
// pid1.Init.
//
// The Go runtime handles signals from its own start, and a signal that comes before a
// signal.Notify has its default action there, which for SIGTERM to a namespace's init is
// exit status 2, nothing said. Packages are initialised in the order of their import
// paths, each once the packages it imports are: this one imports only os, os/signal and
// syscall, so it is initialised right after them, in sandboxd the 23rd of 174 packages,
// where pid1 (which needs path/filepath) was the 108th, 5-11 ms later on a loaded 2-core
// node, and main another 10-50 ms after that (GODEBUG=inittrace=1). Nothing can catch a signal
// before the Go runtime handles signals: the kernel discards one that a namespace's init
// does not handle.
//
// pid1 imports it, and so does examples/supervisor, an init itself, which takes Signals
// over first thing in its Main for the signals it handles and gives every other back to
// the Go runtime (signal.Reset). A program that is PID 1 and imports it must call
// pid1.Init or take Signals over so, or no signal reaches it.
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
