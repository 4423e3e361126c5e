//go:build !linux

package kubeletsim

import "os/exec"

// A hierarchy is a cgroup hierarchy: there is none.
type hierarchy struct{}

// hierarchies returns none: there are no cgroups.
func hierarchies() []hierarchy { return nil }

// A container is a Child's process group alone where there are no
// cgroups.
type container struct{}

// startContained starts cmd and calls reaped with what Wait returned once
// it has exited.
func startContained(_ []hierarchy, cmd *exec.Cmd, reaped func(error)) (*container, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { reaped(cmd.Wait()) }()
	return &container{}, nil
}

// kill reports false: the caller kills the process group.
func (*container) kill() (bool, error) { return false, nil }

// cgroup returns "": there are no cgroups.
func (*container) cgroup() string { return "" }
