package proc

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by the methods of a Process after Close.
var ErrClosed = errors.New("process handle closed")

// errPID is Open's error for a PID that cannot name a process.
func errPID(pid int) error { return fmt.Errorf("pid %d: must be > 0", pid) }
