//go:build !linux

package kubeletsim

import "os/exec"

// A container is a Child's process group alone where there are no
// cgroups.
type container struct{}

// startContained starts cmd and calls reaped with what Wait returned once
// it has exited.
func startContained(cmd *exec.Cmd, reaped func(error)) (*container, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { reaped(cmd.Wait()) }()
	return &container{}, nil
}

// kill reports false: the caller kills the process group.
func (*container) kill() (bool, error) { return false, nil }

// contained reports false: there are no cgroups.
func (*container) contained() bool { return false }
