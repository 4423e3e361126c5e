// Package statedir makes "one server per state directory" true for the examples' node
// servers (examples/sandboxd, examples/gvisor-worker) instead of assumed. Their state
// directory is a hostPath, so it outlives the pod, and during a DaemonSet rolling update
// with maxSurge, or any restart whose new pod starts before the old one has finished
// draining, two servers run on it at once: the new one removed the old one's runsc state
// while the old one was checkpointing its sandboxes into the same directory, and those
// preserves failed, the user sandboxes lost.
//
// A server takes the directory's lock before it touches anything in it, and holds it until
// it exits:
//
//	waitCtx, done := signals.Context(ctx) // internal/startsig: SIGTERM ends the wait
//	lock, err := statedir.Acquire(waitCtx, stateDir, statedir.Config{Logger: logger})
//	done()
//	if err != nil {
//		return err // ctx ended (a SIGTERM) while another server held the directory
//	}
//	defer lock.Release()
//
// Guarantees and limits:
//   - The lock is flock(2) on STATE_DIR/state.lock (LockFile), exclusive. The kernel
//     releases it when the holder's process ends however it ends, SIGKILL and a crash
//     included: a dead server never blocks its successor, and no lock file is ever stale.
//   - The holder writes its PID, its owner (the pod's name) and since when it holds the
//     lock into the file, so a waiter can say for whom it waits.
//   - A second server on the directory waits: it logs at once, then every Config.LogEvery,
//     that it is waiting and for whom, and takes the lock within Config.Poll of the
//     holder's exit. It gives up only when ctx ends (a server ends it at its own SIGTERM:
//     the kubelet ends a pod that waited for its whole grace), with an error that names
//     the holder and why it gave up (context.Cause: "SIGTERM received"); it has then created the directory and the
//     lock file, and touched nothing else.
//   - Lock.RemoveTemps removes what writes of a file the lock's holders alone write
//     (durable.WriteFile) left when a crash cut them short, which no later write reuses:
//     the servers' Report, internal/learned's rates file.
//   - TryAcquire does not wait: it takes the lock or returns a *HeldError naming the
//     holder, and makes nothing but the lock file. internal/learned holds its rates file
//     so, on its own lock file (Config.File: learned-rates.lock), and starts at once
//     when another server holds it.
//   - Not done: the lock binds only servers that take it, on one kernel. A server inside
//     a gVisor sandbox locks within its sandbox; two hosts sharing a network file system
//     get whatever that file system makes of flock. Where flock(2) does not exist (not
//     unix) the lock is always taken.
package statedir
