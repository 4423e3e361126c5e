// Package proctest holds the processes internal/proc's users test against: an init that
// waits for its signals in sigwait, as tini, dumb-init and catatonit do. A test binary runs
// SigwaitInit from an init function when the test's environment says so, the test starts
// it (as PID 1 of a PID namespace of its own, for a sandbox's init), reads its "ready" and
// waits until InSigwait says it waits; then it signals it. And a test run again as a child of
// its own binary (Again), which the test freezes and thaws around an instant of the child's
// run, as a container at its CPU quota or a loaded node stops a process, and whose lines it
// reads: the frozen-process tests of pause, drain and draingrpc. And a cgroup with a CPU
// quota (CPUQuota) such a child joins (JoinCgroup), as a container at its CPU limit: the
// throttled test of internal/bounded.
package proctest
