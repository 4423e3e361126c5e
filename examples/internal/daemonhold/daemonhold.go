package daemonhold

import (
	"context"
	"log/slog"

	"github.com/drainkit/drainkit/ublk"
)

// Live returns the devices the ublk step of rep left live (VerdictLeftLive, VerdictHeld),
// in rep's order; nil for a nil rep.
func Live(rep *ublk.Report) []int {
	if rep == nil {
		return nil
	}
	var live []int
	for _, d := range rep.Devices {
		if d.Verdict == ublk.VerdictLeftLive || d.Verdict == ublk.VerdictHeld {
			live = append(live, d.ID)
		}
	}
	return live
}

// Needed reports whether a process whose exit kills the device daemon (Pdeathsig, or PID 1
// of the daemon's PID namespace) must not exit after the ublk step's last account rep: on a
// kernel where killing the daemon with a live device is not known safe
// (ublk.KernelClass.MayKillWithLiveDevices false), a device was left live or held, or the
// daemon was left running because the step could not tell whether it still serves a disk
// the step does not have (ublk.DaemonReport.CannotTell). A nil rep (no step ran) needs no
// hold.
func Needed(rep *ublk.Report) bool {
	if rep == nil || rep.KernelClass.MayKillWithLiveDevices() {
		return false
	}
	// A daemon the step did not kill because it could not read sysfs to tell whether it
	// still serves a disk the step does not have may serve one live: the step left it to
	// the pod's SIGKILL, not to this exit.
	unsure := rep.Daemon.LeftRunning && rep.Daemon.CannotTell != ""
	return len(Live(rep)) > 0 || unsure
}

// Wait says at ERROR that who (the server, as its log lines name it) does not exit while
// its device daemon pid may serve a live device, step (the teardown, as who's log names it)
// having left it so in rep, then calls wait, unbounded, and says at INFO that the daemon
// exited, with wait's error. Call it only when Needed(rep), with the Report already
// written: in a pod only the daemon's exit or the pod's SIGKILL, which ends the wait with
// the process, ends it, so who must keep SIGTERM from ending the process meanwhile.
func Wait(logger *slog.Logger, who, step string, rep *ublk.Report, pid int, wait func(context.Context) error) {
	if live := Live(rep); len(live) == 0 {
		logger.Error(who+": not exiting while the device daemon may serve a live disk "+step+" could not see (sysfs, or the daemon's fds, not read): its death may crash the host on this kernel, and it dies with this process; waiting for it to exit (the pod's SIGKILL ends the wait)",
			"daemon_pid", pid, "cannot_tell", rep.Daemon.CannotTell, "kernel", rep.Kernel, "kernel_class", rep.KernelClass)
	} else {
		logger.Error(who+": not exiting while the device daemon serves live devices: its death may crash the host on this kernel, and it dies with this process; waiting for it to exit (the pod's SIGKILL ends the wait)",
			"daemon_pid", pid, "devices", live, "kernel", rep.Kernel, "kernel_class", rep.KernelClass)
	}
	err := wait(context.Background())
	logger.Info(who+": the device daemon exited; exiting", "daemon_pid", pid, "err", err)
}
