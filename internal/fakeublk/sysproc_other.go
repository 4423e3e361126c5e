//go:build !linux

package fakeublk

import (
	"errors"
	"os"
	"os/exec"
)

func setPdeathsig(*exec.Cmd) {}

// openChar cannot make a device node on this system.
func (t *Tree) openChar(DeviceSpec) (*os.File, error) {
	return nil, errors.ErrUnsupported
}
