//go:build linux

package ublk

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// supported is true where ublk exists.
const supported = true

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("ublk: uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
