//go:build linux

package proctest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// SigwaitInit is the main of a test binary run as such an init: it sets SIGTERM's action
// back to the default (the Go runtime installs a handler), blocks it and waits for it in
// rt_sigtimedwait, as a C init's sigwait does, after printing "ready"; once it has it, it
// writes "saved" to the file state and returns 0, the exit status. Call it from an init
// function (before TestMain): the thread that runs a Go program's init functions is the
// process's first, whose mask and wait the kernel looks at for a signal sent to the process.
func SigwaitInit(state string) int {
	var dfl [4]uint64 // the kernel's struct sigaction, zero: SIG_DFL, no flags, no mask
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGTERM), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); e != 0 {
		fmt.Println("rt_sigaction:", e)
		return 1
	}
	term := uint64(1) << (syscall.SIGTERM - 1)
	if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 0 /* SIG_BLOCK */, uintptr(unsafe.Pointer(&term)), 0, 8, 0, 0); e != 0 {
		fmt.Println("rt_sigprocmask:", e)
		return 1
	}
	fmt.Println("ready")
	for {
		sig, _, e := syscall.Syscall6(syscall.SYS_RT_SIGTIMEDWAIT, uintptr(unsafe.Pointer(&term)), 0, 0, 8, 0, 0)
		if e == syscall.EINTR { // the Go runtime's own signals (preemption)
			continue
		}
		if e != 0 || syscall.Signal(sig) != syscall.SIGTERM {
			fmt.Println("rt_sigtimedwait:", sig, e)
			return 1
		}
		if err := os.WriteFile(state, []byte("saved"), 0o600); err != nil {
			return 3
		}
		return 0
	}
}

// InSigwait reports whether the first thread of process pid waits in rt_sigtimedwait, as
// /proc/PID/syscall says: a SigwaitInit that printed "ready" soon does.
func InSigwait(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	return err == nil && strings.HasPrefix(string(data), strconv.Itoa(syscall.SYS_RT_SIGTIMEDWAIT)+" ")
}
