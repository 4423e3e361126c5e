//go:build unix

package store

import "syscall"

// openFlags keep a record's open from blocking (a FIFO) or following a link.
const openFlags = syscall.O_NONBLOCK | syscall.O_NOFOLLOW
