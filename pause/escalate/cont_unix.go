//go:build unix

package escalate

import "syscall"

// sigCont is the signal that continues a stopped process (sendCont).
const sigCont = syscall.SIGCONT
