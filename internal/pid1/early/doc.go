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
//
// Guarantees and limits, for PID 1 of a PID namespace that is not the built-in init's
// child (Signals is nil, and nothing is caught, in any other process):
//   - Every signal a process can catch, but SIGURG (the Go runtime's preemption) and
//     SIGCHLD (pid1's reaper asks for it itself), waits on the channel from this
//     package's initialisation until its consumer takes it, a repeat of the same signal
//     included, in the order the signals came: a signal that comes once the one before it
//     is on the channel is behind it. Signals that come at the same moment (pending
//     together, before the Go runtime's handler has run) come in the kernel's order,
//     lowest number first, and a repeat pending with its first is one signal: neither the
//     kernel nor the Go runtime keeps more of standard signals.
//   - The channel holds 64 (a burst before main); os/signal drops any more.
//   - SIGURG and SIGCHLD keep the Go runtime's handling. A consumer gives back to the Go
//     runtime the signals it does not handle with signal.Reset, as the supervisor does:
//     those that came before stay on the channel for it, a later one has the Go
//     runtime's default action (a SIGHUP, SIGINT or SIGTERM ends PID 1 with exit status
//     2; a SIGUSR1 or SIGWINCH is ignored).
package early
