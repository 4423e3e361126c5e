// Package proctest holds the processes internal/proc's users test against: an init that
// waits for its signals in sigwait, as tini, dumb-init and catatonit do. A test binary runs
// SigwaitInit from an init function when the test's environment says so, the test starts
// it (as PID 1 of a PID namespace of its own, for a sandbox's init), reads its "ready" and
// waits until InSigwait says it waits; then it signals it.
package proctest
