//go:build !linux

package kubeletsim

import (
	"errors"
	"os/exec"
	"runtime"
)

// A hierarchy is a cgroup hierarchy: there is none.
type hierarchy struct{}

// hierarchies returns none: there are no cgroups.
func hierarchies() []hierarchy { return nil }

// A container is a Child's process group alone where there are no
// cgroups.
type container struct{}

// startContained starts cmd and calls reap, which waits for the child and
// reaps it.
func startContained(_ []hierarchy, cmd *exec.Cmd, reap func()) (*container, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go reap()
	return &container{}, nil
}

// kill reports false: the caller kills the process group.
func (*container) kill() (bool, error) { return false, nil }

// cgroup returns "": there are no cgroups.
func (*container) cgroup() string { return "" }

// awaitExit returns at once: without waitid's WNOWAIT, the wait is the
// reaping's own.
func awaitExit(int) {}

// PIDNamespace returns why Start cannot run a child as PID 1 of a PID
// namespace of its own: there are none outside Linux.
func PIDNamespace() error { return errors.New("kubeletsim: no PID namespaces on " + runtime.GOOS) }

// asPID1 leaves cmd a plain child: there are no PID namespaces.
func asPID1(*exec.Cmd) (func(error) error, error) { return nil, nil }
