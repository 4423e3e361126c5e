//go:build !unix

package escalate

// sigCont is 0 where no signal stops a process (Windows): no SIGCONT follows the first
// signal (sendCont).
const sigCont = 0
