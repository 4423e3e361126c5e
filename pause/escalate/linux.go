//go:build linux

package escalate

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

func openPidfd(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	return fd, nil
}

func pidfdSignal(fd int, sig unix.Signal) error {
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// pidfdExited polls the pidfd for up to d: it becomes readable when the
// process exits.
func pidfdExited(fd int, d time.Duration) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	ms := int((d + time.Millisecond - 1) / time.Millisecond)
	n, err := unix.Poll(fds, ms)
	if errors.Is(err, unix.EINTR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, nil
}

func closeFd(fd int) error { return unix.Close(fd) }
