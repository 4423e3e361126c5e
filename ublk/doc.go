// Package ublk is drainkit's block-device teardown step for ublk servers
// (a userspace daemon serving /dev/ublkbN to VMs). When a node's pod is
// SIGKILLed the daemon dies with its devices live and guest I/O in flight,
// and on kernels 6.7 to 6.14.5 without fix f40139fde527 (Ubuntu 24.04's
// 6.8, 6.12.y) that can crash the host; this step stops the devices in the
// safe order inside its deadline and never kills the daemon where that is
// unsafe.
//
// Typical wiring, at server start (a bad Config fails here, naming the
// field):
//
//	daemon, err := ublk.FindProcess(ublkd.Process.Pid) // or &ublk.Socket{Path: path, Process: daemon}
//	kernels, err := ublk.LoadKernelDeclarations("/etc/drainkit/kernels") // vendor kernels you verified
//	td, err := ublk.New(daemon, ublk.Config{Kernels: kernels, Logger: logger})
//
// and at shutdown, after the VMs are paused and closed, inside the
// teardown phase's deadline:
//
//	report, err := td.Stop(ctx)     // or drain.Config{Steps: []drain.Step{td}}
//	var unsafe *ublk.UnsafeError
//	if errors.As(err, &unsafe) { ... } // devices live, daemon left running: tell a human
//
// The order (see Teardown.Stop): find the devices in sysfs, leaving
// another server's alone (its /dev/ublkcN open in a process that is not
// the daemon, outside this server's cgroup, or, live, open in none that
// procfs shows while the daemon's fds were read: Config.Devices), and while it
// waits the devices the daemon adds after that; wait until
// nothing holds a disk (a process's fd or memory mapping of the node, a
// process's io_uring with the node among its registered files, a mount,
// swap, a stacked device, a loop device backed by the disk) or may (a
// possible holder, below);
// if some still do at the last-resort point, run the last resort (below);
// ask the daemon to stop (SIGTERM through a pidfd, or AgentENV's socket
// request); wait until every device has left sysfs and the daemon has
// exited; if the daemon does not answer, crashed, or time runs short, stop
// the devices from outside with STOP_DEV/DEL_DEV on /dev/ublk-control
// (io_uring URING_CMD on an SQE128 ring, pure Go; the ioctl-encoded
// command numbers of Linux 6.4 on, and the plain ones of 6.0-6.3 once the
// kernel refused an encoded one); kill the daemon only once
// no device is live, or near the deadline on a kernel that is not
// vulnerable.
//
// Possible holders. The kernel lists a ring's registered files in
// /proc/PID/fdinfo only when its read gets the ring's lock with a trylock,
// and a process's mappings only when /proc/PID/maps gets its memory-map
// lock; a ring mapped with no ring fd has no fdinfo at all. A process
// whose rings' files are not listed within blockdev.RingWait, whose
// mappings are not read within blockdev.MapsWait, or that has a ring
// mapped and no ring fd may hold a disk through them: it is a possible
// holder (Holder.Kind "possible") of every disk, and the step treats it
// as one that does until the holder wait ends. So is, with no PID, what
// holds a disk whose device number sysfs did not give (the last scan's
// holders of it stand), and so are the processes a holders scan did not
// reach: no scan reads procfs past the
// end of the last resort's part of the reserve, where the daemon's stop
// needs its part (a loaded node's procfs takes seconds to read), and the
// holder wait's scans stop halfway through it, the rest the last resort's
// (which, that part over, does not scan again: the last scan stands,
// less the processes it killed and those its check before a kill found
// exited or holding no disk);
// a process a scan did not reach keeps what the last scan that read it
// found, and a scan that cannot list procfs at all keeps every hold the
// last one found there (the processes a possible holder, as above). A
// process whose own fds or maps cannot be read (EACCES, EMFILE; not one
// that exited) is a possible holder naming the error, and keeps what the
// last scan found it hold through them. Each
// scan reads it again,
// so a ring busy only now and then is soon listed and the process known
// for what it is; one never listed is waited for until the last-resort
// point, then killed when doomed (below), and otherwise set aside: it
// keeps no device from stopping, and the Report's "possible holders" step,
// the last resort's fate (ending with what became of the disk) and the log
// name it and what is not known. Sparing its disk would leave the
// daemon to die at the pod's SIGKILL with the disk live (the host-crash
// path) for a process only not known to hold it; stopping the disk costs
// that process its I/O to it, if it held it after all.
//
// The last resort. The pod's SIGKILL takes the whole container cgroup: a
// VMM in it that still holds a disk when the step's time runs out dies a
// few seconds later anyway, and leaving it alive only makes sure the daemon
// dies with a live device, the host-crash path. So on a kernel not known
// fixed (vulnerable, exit may hang, an undeclared vendor build), when
// holders remain at the last-resort point (the end of the holder wait:
// the deadline minus the step's reserve, or HolderWait), the step
// SIGKILLs the holders inside its own cgroup (same cgroup or below in every
// hierarchy; in a container on a cgroup v2 node, which sees its cgroup as
// the root of its cgroup namespace, the container's cgroup, told from the
// host's root by the cgroup.type file only non-root cgroups have; pinned
// with a pidfd, checked again, sent SIGKILL, eight checks at a time and
// all of them before any exit wait, then waited for together; one whose exit is not seen by the end
// of the last resort's part of the reserve runs no more code and no
// longer keeps a disk from stopping), STOP_DEVs
// every device no holder is left on while the daemon still serves it, and
// asks the daemon to stop, which then exits with no live device, all
// within its part of the reserve. Holders outside the cgroup (another pod,
// the host) are never killed, nor are mounts, file systems, swap, stacked
// devices and loop devices backed by a disk (kernel state: no kill releases them; a
// process mapping a disk, holding it through an io_uring's registered
// files, or a possible holder is a process, killed like one with an fd
// when it is in the cgroup and, checked again, still holds a disk or still
// may). A device they still hold is stopped all the same, with STOP_DEV
// while the daemon serves it, when its daemon dies with the pod (in the
// server's cgroup): the kernel stops such a device when its daemon dies,
// so its holders lose it at SIGKILL either way, there with the host-crash
// risk; the daemon is then asked to stop, and Stop returns a
// *StoppedHeldError naming the holders. One with UBLK_F_USER_RECOVERY is
// stopped too, its recovery given up: the last resort runs only on a
// kernel not known fixed, where its daemon's death with it live runs the
// same crash race. One whose daemon is not known to die with the pod
// stays live, the daemon keeps serving it and is not asked to stop, and
// Stop returns a *HeldError. The daemon itself is never killed by it, whatever it holds,
// nor is any process with one of the devices' /dev/ublkcN open (the
// driver lets only a device's server open it: the daemon when the step
// does not know its PID, a per-device server it forked), and their holds,
// like the daemon's, keep no device from stopping; nor is one it cannot
// tell has none open (its fds, or a char device's number in sysfs, not
// read), whose holds stand like a spared holder's. Report.LastResort
// names every holder, killed or spared, its cgroup and why. Config.NoLastResort turns
// it off; Config.StopDespiteHolders replaces it.
//
// Guarantees:
//   - Stop returns by ctx's deadline (plus one sysfs read). Inside it, the
//     step's reserve (Config.Reserve, default 10 s) is kept for
//     the last resort (3/10), the daemon's own stop (2/10), the control
//     fallback (3/10) and the kill (2/10), laid out with deadline.Split;
//     the holder wait (Config.HolderWait) runs before them, and RequestTimeout
//     (5 s) bounds the stop request. When the window is shorter than the
//     reserve, deadline.Split's rule shares it. Without a deadline Stop
//     waits until ctx is cancelled, and the last resort never runs.
//   - When the deadline moves earlier while Stop runs (drain's budget
//     moving SIGKILL earlier), Teardown.Tighten lays the stages not yet
//     over out again from then to the new deadline, by the same rule, and
//     ends the command or wait in progress at its stage's new end: the
//     control fallback and the kill still come before the new deadline.
//     A context cancelled at the new deadline alone leaves them where the
//     first deadline put them.
//   - On a vulnerable kernel the daemon is never killed while a device's
//     disk exists (whatever STOP_DEV or GET_DEV_INFO said of it before),
//     nor while a device without one is not known stopped (STOP_DEV seen
//     complete, or the driver says DEAD), nor while it has the
//     /dev/ublkcN of a disk in sysfs open or mapped (when the step knows
//     its PID),
//     the step's device or not; Stop then returns an
//     *UnsafeError saying so ("devices still live ... daemon left running,
//     unsafe to kill").
//   - The daemon is never asked to stop while anything holds a disk (after
//     the last resort: anything but this process and the daemon, the
//     server, with an fd, a mapping or a ring, a holder the last resort
//     sent SIGKILL, its exit seen or not, and the holders of a device it
//     stopped under them; a process that got its PID since, told by its
//     start time, is another), nor, before the holder
//     wait ends, while something may (a possible holder), unless
//     Config.StopDespiteHolders; Stop then returns a *HeldError naming the
//     holders. Only the last resort kills a holder,
//     and only one in this process's cgroup, never the daemon nor another
//     process with one of the devices' /dev/ublkcN open, nor one it
//     cannot tell has none open.
//   - The Report always has one entry per device the step acts on (another
//     server's, left alone, are named in its Note): initial and final state,
//     in-flight I/O before and after, holders, each action with its
//     duration, and a Verdict.
//   - /dev/ublkcN is never opened (on 6.15+ its close runs the device's
//     release path).
//   - A node without ublk fails no drain: with no device and no daemon, or
//     a daemon that is not running (a process that exited, a socket no
//     server listens on), Stop returns at once with VerdictNothingToDo,
//     its Note saying why, and that the ublk_drv module is not loaded when
//     sysfs has no ublk class. A daemon that runs is asked to stop all the
//     same.
//
// Linux only: on other systems the package builds, FindProcess fails,
// and Stop reports VerdictNothingToDo.
package ublk
