//go:build linux

package realkubelet

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// A proc is one process of the machine as /proc shows it.
type proc struct {
	pid     int
	cmdline string // arguments joined by spaces
}

// processes lists the machine's processes.
func processes() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := processByPid(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

func processByPid(pid int) (proc, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return proc{}, false
	}
	return proc{pid: pid, cmdline: strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))}, true
}

// FindProcess returns the host pid of the one live process whose command
// line contains token (give each pod's main process a unique argument),
// or 0 when there is none.
func FindProcess(token string) int {
	for _, p := range processes() {
		if strings.Contains(p.cmdline, token) && !zombie(p.pid) {
			return p.pid
		}
	}
	return 0
}

// WaitProcess waits up to within for a process whose command line contains
// token to appear, and returns its host pid. It fails the test otherwise.
func WaitProcess(t testing.TB, token string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if pid := FindProcess(token); pid != 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("realkubelet: no process with %q after %v", token, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Watch observes one process of the machine until it exits, through a
// pidfd: it is exact even for a process that is not our child, and the pid
// cannot be reused under it.
type Watch struct {
	fd int
}

// WatchProcess opens a Watch on pid.
func WatchProcess(pid int) (*Watch, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("realkubelet: pidfd_open %d: %w", pid, err)
	}
	return &Watch{fd: fd}, nil
}

// Wait returns the moment it sees the process exit, or an error after
// within. It closes the Watch. A process that exited before the call is
// stamped with the call's moment: to time a death, wait from before it
// (a goroutine started with the process).
func (w *Watch) Wait(within time.Duration) (time.Time, error) {
	defer unix.Close(w.fd)
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return time.Time{}, errors.New("realkubelet: the process is still alive")
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, time.Second)/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		if n > 0 {
			return time.Now(), nil
		}
	}
}

// zombie reports whether pid has exited: a zombie, or gone (its stat unreadable).
func zombie(pid int) bool {
	st, err := procstat.Read(pid)
	return err != nil || st.State == 'Z'
}
