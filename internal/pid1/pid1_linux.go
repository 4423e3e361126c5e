package pid1

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/pid1/early"
	"github.com/drainkit/drainkit/internal/pid1/ready"
)

// ChildEnv is the environment variable that marks the child the init started. Its value
// is the descriptor of the pipe through which the child says it is ready (Ready).
const ChildEnv = early.ChildEnv

// heldMax is the most signals the init holds for a program not ready yet; more are
// dropped (a signal pending twice in the kernel is delivered once anyway).
const heldMax = 64

// Init, called first thing in main, makes a process that is PID 1 of its PID namespace
// an init for its own program and does not return: it starts the program again as its
// child, forwards signals to it, reaps every process that exits, and exits with the
// child's status (see the package doc). In the child, and in any process that is not
// PID 1, it removes ChildEnv from the environment and returns at once. When the child
// cannot be started it says so on stderr and returns, and the program runs as PID 1
// without an init; the signals caught so far, and those until the program calls Ready,
// are held and then sent to it (holdForSelf).
func Init() {
	v, child := os.LookupEnv(ChildEnv)
	_ = os.Unsetenv(ChildEnv) // a process the program starts is not the child
	if child {
		ready.Take(v)
		nameAfterArgv0()
		return
	}
	if os.Getpid() != 1 {
		return
	}
	code, err := run(os.Args, os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: built-in init: %v: running as PID 1 without it (orphans are not reaped)\n",
			filepath.Base(os.Args[0]), err)
		return
	}
	os.Exit(code)
}

// Ready, called by the program once it handles SIGTERM, lets the init forward the
// signals it held since it started the program (see package ready, which internal/startsig
// calls instead, so as not to import this package).
func Ready() { ready.Ready() }

// nameAfterArgv0 gives the child the command name the init has (ps, top and pgrep show
// it), the base name of argv[0] cut to the kernel's 15 bytes, instead of "exe", the name
// of the /proc/self/exe it was started from. It does nothing when /proc cannot say.
func nameAfterArgv0() {
	name := filepath.Base(os.Args[0])
	_ = os.WriteFile("/proc/self/comm", []byte(name[:min(len(name), 15)]), 0)
}

// run starts /proc/self/exe with argv and env as the child, and forwards and reaps until
// the child has exited; it returns the child's exit status.
func run(argv, env []string) (int, error) {
	// Notified before the child exists (from package early's initialisation on), so no
	// signal and no SIGCHLD is missed; the buffer holds a burst while the loop forwards.
	sigs := early.Signals()
	if sigs == nil {
		sigs = make(chan os.Signal, 64)
		signal.Notify(sigs)
	}
	signal.Notify(sigs, syscall.SIGCHLD) // what early leaves out: the reaps
	pid, readyc, err := startChild(argv, env)
	if err != nil {
		holdForSelf(sigs)
		return 0, fmt.Errorf("starting /proc/self/exe: %w", err)
	}
	// Held until the child is ready for them (Ready, or its exit): see Ready.
	var held []syscall.Signal
	for {
		select {
		case <-readyc:
			readyc = nil
			for _, s := range held {
				_ = syscall.Kill(pid, s) // not reaped yet: the pid is the child's
			}
			held = nil
			continue
		case sig := <-sigs:
			switch s := sig.(syscall.Signal); {
			case s == syscall.SIGCHLD || s == syscall.SIGURG:
			case readyc != nil:
				if len(held) < heldMax {
					held = append(held, s)
				}
			default:
				// Until the child is reaped below its pid is its own (a zombie's included).
				_ = syscall.Kill(pid, s)
			}
		}
		// Reap after every signal, not only SIGCHLD: a SIGCHLD dropped while the buffer
		// was full left a signal in it, whose turn comes after the exit it missed.
		if ws, done := reap(pid); done {
			if ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return ws.ExitStatus(), nil
		}
	}
}

// holdForSelf holds the signals of sigs for the program that runs as PID 1 itself, the
// init having failed to start it as its child (its fork refused at the pod's pids limit,
// no /proc/self/exe): those caught from package early's initialisation on (a SIGTERM
// while the packages were initialised) and those until the program calls Ready, which it
// does once it handles SIGTERM; then, in Ready's caller (ready.Hold), it stops catching
// and sends them to this process in the order they came, where the program's handlers get
// them, as the init would have forwarded them to its child. Dropped, as they were, a
// SIGTERM that came before Ready never reached the program: it ran on with no drain until
// the kubelet's SIGKILL. Stopped in a goroutine Ready woke, the hold went on catching for
// 1 to 10 ms after Ready on a loaded node, and a SIGTERM then reached the program twice,
// its handler's and the hold's (row 1150). One that comes between the program's
// signal.Notify and its Ready still does: the hold cannot tell it from one that came
// before, which the program never got; in startsig.Catch that is a few calls, no wait.
func holdForSelf(sigs chan os.Signal) {
	var held []syscall.Signal
	keep := func(sig os.Signal) {
		if s := sig.(syscall.Signal); s != syscall.SIGCHLD && s != syscall.SIGURG && len(held) < heldMax {
			held = append(held, s)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case sig := <-sigs:
				keep(sig)
			case <-stop:
				return
			}
		}
	})
	ready.Hold(func() {
		signal.Stop(sigs) // first: every later signal is the program's, or has its default action
		close(stop)
		wg.Wait() // held is this goroutine's now
		for len(sigs) > 0 {
			keep(<-sigs)
		}
		for _, s := range held {
			_ = syscall.Kill(os.Getpid(), s)
		}
	})
}

// startChild starts the child from a goroutine locked to its thread, which then holds the
// thread until the init exits: Pdeathsig fires when the thread that started the child
// exits, not the process. The loop that forwards signals runs elsewhere, unlocked: a
// goroutine locked to a thread is woken through that thread, and forwarding from it added
// 0.15-0.19 ms to a signal's way, against 0.06-0.12 ms unlocked (BenchmarkSignalForwarding).
// ready is closed once the child has closed its end of the ready pipe (Ready),
// or exited.
func startChild(argv, env []string) (pid int, ready <-chan struct{}, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, fmt.Errorf("the ready pipe: %w", err)
	}
	type started struct {
		pid int
		err error
	}
	given := inherited()
	files := append(slices.Clip(given), w.Fd()) // the ready pipe above what the program is given
	readyFD := strconv.Itoa(len(files) - 1)
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if tty := controllingTerminal(); tty >= 0 {
		attr.Foreground, attr.Ctty = true, tty
	}
	done := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
			Env:   append(env, ChildEnv+"="+readyFD),
			Files: files,
			Sys:   attr,
		})
		if err != nil && attr.Foreground {
			giveTerminalBack(attr.Ctty)
		}
		done <- started{pid, err}
		if err != nil {
			runtime.UnlockOSThread()
			return
		}
		select {} // never unlocked, so the thread never exits
	}()
	s := <-done
	_ = w.Close() // the child's is the only write end left
	if s.err != nil {
		_ = r.Close()
		return 0, nil, s.err
	}
	closeGiven(given)
	closed := make(chan struct{})
	go func() {
		var b [1]byte
		for {
			if _, err := r.Read(b[:]); err != nil { // EOF: Ready, or the child's exit
				break
			}
		}
		_ = r.Close()
		close(closed)
	}()
	return s.pid, closed, nil
}

// controllingTerminal returns the first of stdin, stdout and stderr that is this process's
// controlling terminal with this process's group in its foreground (a pod's console under
// `tty: true`: runc makes it PID 1's), -1 when none is. The child is then started with its
// process group made the terminal's foreground one (SysProcAttr.Foreground), as tini does:
// in the child, before the exec, its signals still blocked, so the change draws no
// SIGTTOU, and before the program can touch the terminal. Left in the background, the
// program was stopped by SIGTTIN at its first read of the terminal, for good, and a
// Ctrl-C the init forwarded stayed pending. A terminal whose foreground is another group's
// (the init started in a shell's background job) is not taken from it. Nor is the terminal
// handed back when the child exits: the init exits then too, and a shell it was started
// from takes its terminal back itself.
func controllingTerminal() int {
	for fd := range 3 {
		// TIOCGPGRP fails (ENOTTY) on a terminal that is not the caller's controlling one.
		if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil {
			if !inForeground(fg) {
				return -1
			}
			return fd
		}
	}
	return -1
}

// inForeground reports whether this process's group is fg, the foreground group of its
// controlling terminal. Both numbers are this PID namespace's, 0 for a group outside it:
// under `unshare --pid --fork` started from a shell, both groups are (the job's and the
// terminal's foreground one), and 0 == 0 took them for the same, so the child of an init
// in a shell's background job took the shell's terminal. There the kernel tells: a read
// of no bytes with SIGTTIN blocked fails (EIO) in a background group, and reads nothing in
// the foreground one. It reads from a non-blocking descriptor of its own (/dev/tty, the
// controlling terminal), where a foreground reader asleep in its read of the terminal
// (`cat | unshare -pf server`) holds its read lock: EAGAIN, after the background check;
// the blocking stdio waited for that reader's next line. SIGTTIN is blocked in this
// thread alone, for the call, so none is sent (to the job's group) and the init's
// forwarding misses nothing. Where /dev/tty does not open, the terminal is not taken.
func inForeground(fg int) bool {
	if own := syscall.Getpgrp(); fg != 0 || own != 0 {
		return fg == own
	}
	tty, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(tty)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ttin, was := signalSet(unix.SIGTTIN), unix.Sigset_t{}
	if unix.PthreadSigmask(unix.SIG_BLOCK, &ttin, &was) != nil {
		return false
	}
	_, err = unix.Read(tty, nil)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &was, nil)
	return err == nil || errors.Is(err, unix.EAGAIN)
}

// signalSet is the signal set that holds sig alone.
func signalSet(sig syscall.Signal) unix.Sigset_t {
	var set unix.Sigset_t
	n := int(sig) - 1
	set.Val[n/bits.UintSize] = 1 << (n % bits.UintSize)
	return set
}

// giveTerminalBack makes this process's group the foreground one of tty again, after a
// child started with Foreground failed: it had made its own group the foreground one
// before its exec failed, and the program, which then runs as PID 1 itself, was left in
// the background of its own terminal, its reads failing (EIO) and a Ctrl-C sent to the
// dead child's group. From the background, TIOCSPGRP fails with EIO (PID 1's group is
// orphaned) or draws SIGTTOU unless the caller blocks SIGTTOU: this thread, locked to its
// goroutine by the caller, blocks it for the call alone. Nothing is left to do if it
// fails: the program runs on, as before, without the terminal.
func giveTerminalBack(tty int) {
	ttou, was := signalSet(unix.SIGTTOU), unix.Sigset_t{}
	if unix.PthreadSigmask(unix.SIG_BLOCK, &ttou, &was) != nil {
		return
	}
	_ = unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, syscall.Getpgrp())
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &was, nil)
}

// inherited returns the descriptors the program gets, each at its number: stdio and every
// descriptor this process was started with that is open and not close-on-exec (runc's
// --preserve-fds, socket activation's LISTEN_FDS), as tini passes them on; a number in
// between that is not one of them is closed in the child (-1). The Go runtime's own
// descriptors and the ready pipe's are close-on-exec.
func inherited() []uintptr {
	files := []uintptr{0, 1, 2}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 { // ReadDir's own is closed by now
			continue
		}
		for len(files) <= fd {
			files = append(files, ^uintptr(0))
		}
		files[fd] = uintptr(fd)
	}
	return files
}

// closeGiven closes this process's copies of the descriptors above stdio that it passed
// on (inherited), which are the program's alone now: one the init kept open outlived the
// program's close of it, a listening socket went on taking connections nobody accepted
// after the server had stopped listening to drain, and a pipe's reader saw no EOF.
func closeGiven(given []uintptr) {
	for fd := 3; fd < len(given); fd++ {
		if given[fd] != ^uintptr(0) {
			_ = unix.Close(fd)
		}
	}
}

// reap collects every process that has exited, without blocking, and reports the
// child's status once the child is among them.
func reap(child int) (status syscall.WaitStatus, exited bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil || pid <= 0: // ECHILD: none left; 0: none has exited
			return status, exited
		case pid == child:
			status, exited = ws, true
		}
	}
}
