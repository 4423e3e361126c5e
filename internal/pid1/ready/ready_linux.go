package ready

import (
	"strconv"
	"sync"
	"syscall"
)

// fd is the program's descriptor of the ready pipe, or -1; Ready closes it once. release
// is the hold of the built-in init that could not start its child (Hold), which Ready ends.
var (
	fd      = -1
	once    sync.Once
	mu      sync.Mutex
	release func()
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
// action and ends the program, with no drain and no Report. Where the init could not start
// the program as its child and holds the signals in the program's own process (Hold), that
// hold is over when Ready returns. A second call, or one in a process that is not the
// init's child and holds nothing, does nothing.
func Ready() {
	once.Do(func() {
		if fd >= 0 {
			_ = syscall.Close(fd) // the init reads the end of the pipe
		}
		mu.Lock()
		end := release
		mu.Unlock()
		if end != nil {
			end()
		}
	})
}

// Hold is for the built-in init that could not start its child (pid1.Init), whose program
// runs as PID 1 itself and gets there the signals the init held: Ready calls end, in its
// caller and before it returns, and end stops the hold and sends the held signals to the
// process. The hold must end there, not in a goroutine Ready wakes: until it stops
// catching, every signal reaches both the program's handler, installed before Ready, and
// the hold, which sends it once more. Woken, the hold stopped 1 to 10 ms after Ready on a
// loaded node (row 1150), where a SIGTERM reached the program twice.
func Hold(end func()) {
	mu.Lock()
	defer mu.Unlock()
	release = end
}
