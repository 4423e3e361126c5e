//go:build linux

package ublk

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// supported is true where ublk exists.
const supported = true

// inode is fi's inode number.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func kernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("ublk: uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}
