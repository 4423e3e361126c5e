// Package escalate stops a target that saves its state on a signal — a
// gVisor actor that checkpoints on SIGTERM, a process that flushes and
// exits — with a bounded escalation: the signal, then SIGCONT (so that a
// target stopped by SIGSTOP acts on it, as systemd does), a bounded wait,
// SIGKILL, a bounded wait more. It tells apart a clean exit, an exit after SIGKILL
// and an end it could not observe, and never takes a failed wait for an
// exit: a wait that a child reaper stole (ECHILD) makes it ask the target
// whether it exited (`runsc state`, a pidfd), and unknown means SIGKILL
// when the wait after the signal ends.
//
// Typical wiring, for a runtime that preserves by signalling:
//
//	target := runscTarget("/run/runsc", id)
//	sb := &escalate.Sandbox{Name: id, Target: target, Policy: escalate.Policy{KillWait: 2 * time.Second}}
//	// sb is a pause.Sandbox: list it from the server's pause.Lister
//
// (a Sandbox whose Policy gives no TermWait waits at most 30 s after the
// signal, the kubelet's default grace: each Preserve holds one of the
// Preserver's slots while it waits, and ones that ignore the signal must
// not hold them all to the end of the window);
//
// where runscTarget (Example_runsc has it whole) returns
// escalate.Funcs{SignalFunc: kill, WaitFunc: wait, ExitedFunc: state} over
// runsc kill, wait and state, each reading runsc's answer as Funcs says:
// a kill refused with "sandbox is not running" is os.ErrProcessDone, and
// state is the status runsc prints ("stopped"), never whether `runsc
// state` failed, which it does not for a stopped container and does when
// its context's deadline cuts it;
//
// or, for a child process the server started, escalate.Cmd(cmd), which
// pins it with the pidfd os/exec started it with and reaps it.
//
// Guarantees: Policy.Stop returns by its context's deadline (or after
// TermWait + KillWait without one); the wait after the signal ends
// KillWait before the deadline, laid out by deadline.Split, so SIGKILL and
// its wait fit, or, in a window shorter than 2 x KillWait, halfway: the
// two waits then share it, the kill wait with less than KillWait. A
// deadline that moves earlier during the wait after the signal (the
// Deadline a drain step's or a Preserve's context reports, which a budget
// that moves SIGKILL earlier moves) ends that wait as if the context had
// had it from the start: Stop reads it again as it moves (the Deadline
// of a Preserver's or a drain step's context says when), or, for a
// context that does not say, every tenth of KillWait (10 ms to 1 s), so
// SIGKILL and its wait still fit. A SIGKILL is sent
// even when the context ended first (cancelled, or a budget that moved
// SIGKILL earlier): its send runs under a context of its own, given at
// least a second past the context's end, the one time Stop may return
// after it.
package escalate
