//go:build linux

package proctest

import (
	"os"
	"syscall"
)

// FreezeSelf stops the calling process (SIGSTOP) at this point of the
// calling goroutine's run, for a Child's test to thaw, as a process is
// frozen while it runs: the signal is sent to the thread the goroutine
// ran on as it read its id, which stops as the call returns, and with it
// the process; the goroutine keeps its P meanwhile (a raw system call),
// so it runs on as soon as its thread runs again. A kill(2) of the process hands the stop to its first
// thread, and under load the process ran on for tens of ms before it
// stopped (the call returning at once, 18 ms before the process stopped,
// beside 12 busy loops); a system call that gives its P up for the stop
// waited, thawed, for one, while the rest of the process ran (120 ms,
// the same).
func FreezeSelf() error {
	_, _, errno := syscall.RawSyscall(syscall.SYS_TGKILL, uintptr(os.Getpid()), uintptr(syscall.Gettid()), uintptr(syscall.SIGSTOP))
	if errno != 0 {
		return errno
	}
	return nil
}
