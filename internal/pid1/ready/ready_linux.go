package ready

import (
	"strconv"
	"sync"
	"syscall"
)

// fd is the program's descriptor of the ready pipe, or -1; Ready closes it once, and
// closes done.
var (
	fd   = -1
	once sync.Once
	done = make(chan struct{})
)

// Take keeps the ready pipe that v (the value of pid1.ChildEnv, a descriptor number)
// names for Ready, close-on-exec so that no process the program starts holds it open.
// pid1.Init calls it in the init's child. A v that names no pipe (an environment set by
// hand) is left alone, and Ready then does nothing.
func Take(v string) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 2 {
		return
	}
	var st syscall.Stat_t
	if syscall.Fstat(n, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return
	}
	syscall.CloseOnExec(n)
	fd = n
}

// Ready, called by the program once it handles SIGTERM, lets the built-in init forward
// the signals it held since it started the program, in the order they came, and every
// later one as it comes. Until then, or until the program exits, the init holds every
// signal: one forwarded before the program handles it (while the Go runtime and every
// package's init run, tens of milliseconds for a server on a loaded node) has its default
// action and ends the program, with no drain and no Report. A second call, or one in a
// process that is not the init's child, does nothing.
func Ready() {
	once.Do(func() {
		if fd >= 0 {
			_ = syscall.Close(fd) // the init reads the end of the pipe
		}
		close(done)
	})
}

// Done is closed once Ready has been called: for the built-in init that could not start
// its child, whose program runs as PID 1 itself and gets there the signals the init held
// (pid1.Init).
func Done() <-chan struct{} { return done }
