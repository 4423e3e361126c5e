// Package proc is drainkit's one process handle: a process pinned by a
// pidfd (Linux 5.3+), so a signal never reaches another process that
// reused its PID, and its exit is seen by polling the pidfd, without
// reaping it (a zombie counts as exited; its parent reaps it as before).
//
// ublk.Process (a ublk daemon found by its PID, Open) and escalate.Cmd (a
// child stopped by signals, Dup of the pidfd os/exec made it with) are
// built on it. On systems other than Linux Open and Dup fail with an error
// wrapping errors.ErrUnsupported.
package proc
