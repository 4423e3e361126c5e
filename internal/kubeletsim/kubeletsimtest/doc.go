// Package kubeletsimtest starts the real child process a test terminates with
// kubeletsim, and makes sure the test leaves none behind. kubeletsim itself is
// linked into the drainsim example, so it takes no testing.TB: this package is
// the tests' side of it, shared by the end-to-end tests of drain and the
// examples.
//
//	child := kubeletsimtest.Start(t, exec.Command(server, args...))
//	tl, err := kubeletsim.Terminate(ctx, child, kubeletsim.HTTPGet{URL: base + "/drain"}, 6*time.Second)
//
// Guarantees: the child is PID 1 of a PID namespace of its own, with that
// namespace's /proc, as a pod's container runs (where it cannot be, not
// root, the test is skipped, failed under CI=true); a command that does not
// start fails the test at once; the test's
// cleanup SIGKILLs the child's whole container (kubeletsim.Child: its cgroup
// where one can be made, and its process group), as the kubelet's SIGKILL
// takes the container, and waits until the child was reaped, so no process and no
// reaping goroutine outlive the test.
package kubeletsimtest
