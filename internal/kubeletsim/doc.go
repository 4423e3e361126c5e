// Package kubeletsim terminates a process exactly as the kubelet terminates
// a pod's container, so tests and the drainsim example can replay a node
// drain: run the preStop hook bounded by the grace period, subtract the
// hook's elapsed time truncated to whole seconds, raise what is left to the
// 2 s minimum, send SIGTERM, and SIGKILL the whole container when that
// runs out. It records the timeline.
//
// Two kinds of process: a real child (Start, over *exec.Cmd in a cgroup
// of its own where one can be made, as root, cgroup v2's or v1's pids
// hierarchy, found in /proc/self/mountinfo, and in its own
// process group, so SIGKILL takes its daemons too, those that left the
// group or daemonized included, as the container runtime kills the
// container's cgroup; without a cgroup, the process group alone; the
// cgroups a simulator SIGKILLed left, the next Start removes, with what
// runs in them), and an
// in-process one (NewInProcess) for code running under
// testing/synctest, where SIGTERM arrives on a channel and SIGKILL is a
// channel the code must obey.
//
//	child, err := kubeletsim.Start(exec.Command(server, args...))
//	tl, err := kubeletsim.Terminate(ctx, child, kubeletsim.HTTPGet{URL: base + "/drain"}, 6*time.Second)
//	fmt.Print(tl) // one event a line, relative to T0:
//	//         0s  preStop hook started (grace 6s)
//	//       3.9s  preStop hook returned after 3.9s
//	//       3.9s  SIGTERM (SIGKILL due in 3s)
//	//       4.6s  process exited, 2.3s before SIGKILL
//
// Guarantees: Terminate returns once the process exited; it waits for the
// hook at most the grace period (and, like the kubelet, never cancels it:
// an overrunning hook runs on until the process is gone) and for the exit
// at most the remaining grace, never less than the 2 s floor, hook or no
// hook; then it sends SIGKILL and waits for the exit bounded by ctx.
// Measured holds the timings the real kubelet showed for the same
// scenarios; the simulator agrees with them within 0.2 s.
//
// The child is PID 1 of a PID namespace of its own, with that namespace's
// /proc mounted in a mount namespace of its own, as a pod's container runs
// (PIDNamespace: as root; elsewhere a plain child): a SIGTERM it has no
// handler for is dropped by the kernel, not its end; an orphan of its
// descendants is re-parented to it, for it to reap; its exit or SIGKILL
// ends every process of the namespace, one that moved itself out of the
// container's cgroup included (runsc, given no cgroupsPath, moves its
// sandbox and gofer into a cgroup named after the container at the root of
// each hierarchy it sees). The process started first is the binary that
// called Start (a package init of this package's), which mounts /proc
// and execs the command in its own place, as runc's init does: the command
// keeps PID 1 and gets its argv, environment and descriptors as given.
//
// Not modelled: an Exec hook
// runs beside the container, not in it: its process group dies with the
// container, a process that left the group does not.
package kubeletsim
