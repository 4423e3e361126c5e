// Package pid1 is the init built into drainkit's node servers (examples/gvisor-worker,
// examples/sandboxd), the way tini or `docker run --init` put one in front of a
// container's command, so a server is safe as PID 1 whatever its manifest says.
//
// Why: a pod's container runs its command as PID 1 of the pod's PID namespace, with no
// init in front unless the manifest adds one. `runsc run -detach` and `runsc checkpoint`
// leave gVisor's processes (runsc-sandbox, runsc-gofer, ...) re-parented to PID 1, and a
// server that never calls wait4 for processes it did not start leaves them zombies: five
// per checkpoint, and every later `runsc delete` of the sandbox waited for a zombie nobody
// reaped until its 5 s ran out, so a Restore in the same pod failed. The server itself
// cannot simply reap everything: a wait4(-1) loop would steal the exit statuses of its own
// os/exec children (the runsc commands it runs).
//
// Call Init first thing in main:
//
//	func main() {
//		pid1.Init() // as PID 1: runs this program as its child, reaps, exits with its status
//		os.Exit(Main(context.Background(), os.Args[1:], os.Stderr)) // Main: startsig.Catch, which calls pid1.Ready
//	}
//
// As PID 1 of its PID namespace, Init does not return: it runs the same binary again
// (/proc/self/exe, the same arguments, environment, stdio and inherited descriptors, each
// at its number, as tini passes them on, the init's own copies of those above stdio then
// closed, so the program's close of one is the last; the child takes argv[0]'s
// base name as its command name, not "exe") as its only child, forwards every signal it
// can catch to it, reaps every process that exits (the child and every orphan re-parented
// to it), and exits with the child's status once the child has exited. The child is the
// program: it writes the termination message and the Report files as it would as PID 1,
// and it gets SIGTERM about 0.1 ms after PID 1 does, once it is ready for it: the program
// calls Ready once it handles SIGTERM (internal/startsig's Catch does, through package
// ready), and until then the init holds every signal, then forwards the held ones in the
// order they came.
//
// Anywhere else (a child of a supervisor, a process started by hand or by a test, a pod
// that has an init or shares its PID namespace) Init returns at once and does nothing.
//
// Guarantees and limits:
//   - Forwarded: every signal a process can catch (SIGTERM above all: the kubelet sends it
//     to PID 1; SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, ...), as it arrives,
//     except SIGCHLD (the init's own) and SIGURG (the Go runtime's preemption signal).
//   - Held until Ready: a signal that comes while the program starts (the Go runtime and
//     every package's init run before main: tens of milliseconds for a server on a loaded
//     node) would have its default action there, and SIGTERM's ends the program with no
//     drain and no Report. The init holds it until the program calls Ready or exits (64
//     at most). A program that never calls Ready gets no signal but SIGKILL: call it.
//     The program sees a held signal arrive when it is forwarded, so internal/startsig
//     counts the kubelet's SIGKILL from then: later than the kubelet does by the hold,
//     the program's start (tens of milliseconds, against a grace of seconds).
//     PID 1 itself catches every signal from the initialisation of package early on,
//     among the first packages of the program, not from Init, which main reaches tens of
//     milliseconds later. Not covered: a SIGTERM to PID 1 before its Go runtime handles
//     signals (its first milliseconds) is discarded by the kernel, which delivers to a
//     namespace's init no signal it does not handle; one between that and package early's
//     initialisation ends PID 1 with status 2. A program that imports this package must
//     call Init first thing in main: as PID 1 it gets no signal otherwise.
//     SIGKILL and SIGSTOP cannot be caught: a SIGKILL to PID 1 ends the whole namespace, as
//     it did before, and the child, started with Pdeathsig SIGKILL, never outlives the init.
//     Forwarding adds about 0.1 ms to a signal's way from kill(2) to the program
//     (BenchmarkSignalForwarding, on a loaded 2-core VM), against seconds of drain.
//   - The child has a process group of its own, so a signal sent to PID 1's group reaches
//     it once, forwarded, not twice: a second SIGINT or SIGTERM forces a server's shutdown.
//     Where PID 1 has a controlling terminal whose foreground group is PID 1's (a pod with
//     `tty: true`), the child's group is made the terminal's foreground one before the
//     program starts, as tini does: the program reads and writes the terminal (in the
//     background its first read stopped it for good), and a Ctrl-C there reaches its
//     group, not the init's. A shell's background job keeps its shell's terminal, under
//     `unshare --pid --fork` too, where both groups are outside PID 1's namespace. Where the child
//     cannot be started after all, the init gives the terminal back to its own group,
//     where the program then runs.
//   - Exit status: the child's exit code, or 128+n when signal n ended it (as shells and
//     tini report it). Processes still running when the child has exited are not waited
//     for: PID 1's exit ends them, as the kernel ends a namespace whose init exits.
//   - Not done: no signal is sent to the child's process group or to orphans, no
//     subreaper is set up when the process is not PID 1 (under a supervisor, its parent
//     reaps), nothing is logged unless the init cannot start the child (then the program
//     runs as PID 1 without it, and says so on stderr; the signals caught so far, a
//     SIGTERM while the packages were initialised, and those until the program calls
//     Ready are still held, then sent to the program itself, where they were dropped; the
//     hold is over when Ready returns, so a later signal comes once, but one between the
//     program's signal.Notify and its Ready comes twice: its handler's and the hold's).
//
// The environment variable DRAINKIT_PID1_CHILD marks the child and names its end of the
// ready pipe (the descriptor above those the program is given, fd 3 where it is given
// stdio alone; close-on-exec from Init on); Init removes it, so no process the
// program starts inherits it. Never set it: a PID 1 that finds it takes itself
// for the child and runs without the init.
package pid1
