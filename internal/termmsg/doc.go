// Package termmsg writes a drain's compact summary to the container's
// termination message path, so that it shows in the pod's last state
// (kubectl describe pod, .status.containerStatuses[].lastState.terminated.message)
// after the process is gone: the verdict, the sandboxes by outcome, T0 and
// SIGKILL, every phase, the ublk teardown's verdict and why (its Note),
// and as many lost sandbox IDs as fit in the kubelet's
// 4 KiB. A pod of 4 or more containers keeps only the head of it (12288
// bytes / containers, 1024 with 12): the counts come first, a message
// longer than 1024 bytes says so, and the lost IDs, last, after their
// count, each end with their outcome, so a cut can only shorten the list.
// A server that could not start writes StartFailed instead: no drain ran,
// and why. A supervisor whose server exited on its own, no drain run, gives
// its ublk teardown's line (UblkLine) among Summary's extra.
//
//	path, explicit := termmsg.Path(*flagTerminationLog) // flag, else DRAINKIT_TERMINATION_LOG, else /dev/termination-log
//	msg := termmsg.Summary(rep, "full report: "+reportPath)
//	if _, err := termmsg.Write(path, explicit, msg); err != nil {
//		logger.Warn("termination message not written", "error", err)
//	}
//
// The default path is written only when it exists (the kubelet mounts it
// into the container), so a server run by hand creates no file in /dev.
package termmsg
