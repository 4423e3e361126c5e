// Package daemonhold keeps an example server from exiting while its ublk device daemon,
// which dies with it, may still serve a live device on a kernel where killing the daemon
// then may crash the host. The supervisor's -daemon child and sandboxd's fake device
// daemon are started with Pdeathsig SIGKILL, and a process that is PID 1 of its pod's PID
// namespace takes every process of it along when it exits: when the ublk teardown step
// refused to kill the daemon (a device left live or held, or sysfs not read, so that it
// could not tell what else the daemon serves: ublk.DaemonReport.CannotTell), the server's
// own exit would have been that kill (docs/faults.md rows 405, 406, 436).
//
// A server calls Needed with the step's last ublk.Report once its own Report is written,
// and Wait when it says so, before it releases anything the daemon's devices still need:
//
//	if daemonhold.Needed(rep) {
//		daemonhold.Wait(logger, "sandboxd", "the ublk step", rep, pid, wait)
//	}
//
// Guarantees: Wait logs at ERROR that the server waits, and why, before it waits; it
// waits unbounded, for the daemon's exit or the pod's SIGKILL (the kubelet's at the grace
// period's end), which ends the daemon and the server alike; the daemon's exit is logged
// at INFO.
package daemonhold
