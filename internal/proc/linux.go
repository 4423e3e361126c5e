//go:build linux

package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a process pinned by a pidfd. Its methods may be called from
// several goroutines; Close waits for the calls in progress.
type Process struct {
	pid int
	h   *handle
}

// handle holds the pidfd; a cleanup closes it if the Process is dropped
// without Close.
type handle struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

func (h *handle) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return unix.Close(h.fd)
}

// Open pins the process pid with a pidfd. It fails if there is no such
// process or it has already been reaped (an error wrapping
// os.ErrProcessDone), or if the kernel has no pidfds.
func Open(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, errPID(pid)
	}
	fd, err := unix.PidfdOpen(pid, 0) // close-on-exec by default
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("pidfd_open %d: %w (%w)", pid, os.ErrProcessDone, err)
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return pinned(pid, &handle{fd: fd}), nil
}

// pinned is the Process of pid held by h, whose pidfd a cleanup closes if
// the Process is dropped without Close.
func pinned(pid int, h *handle) *Process {
	p := &Process{pid: pid, h: h}
	runtime.AddCleanup(p, func(h *handle) { _ = h.close() }, h)
	return p
}

// Dup pins op's process with a duplicate of the pidfd os.StartProcess got
// when it made the process (clone with CLONE_PIDFD), not by its PID: unlike
// Open, it cannot pin another process that reused the PID after the child
// was reaped behind op's back (a wait4(-1) reaper). It fails with an error
// wrapping os.ErrNoHandle when op has no pidfd (the kernel has none, or op
// came from os.FindProcess without one), with one wrapping os.ErrProcessDone
// once op.Wait has returned, and with another once op.Release was called.
func Dup(op *os.Process) (*Process, error) {
	fd, derr := -1, error(nil)
	err := op.WithHandle(func(h uintptr) { fd, derr = unix.FcntlInt(h, unix.F_DUPFD_CLOEXEC, 0) })
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", op.Pid, err)
	}
	return pinned(op.Pid, &handle{fd: fd}), nil
}

// Adopt pins the process of pidfd fd, which it takes over (closed by Close), one a
// caller got elsewhere than from a PID (SO_PEERPIDFD: a socket's peer): no PID is read
// before the pidfd, so no other process that reused it can be pinned. Its PID is the
// one the pidfd's fdinfo gives in /proc's namespace. It fails with an error wrapping
// os.ErrProcessDone, fd closed, once the process has exited and been reaped, and when
// the kernel does not say its PID there.
func Adopt(fd int) (*Process, error) {
	h := &handle{fd: fd}
	pid, err := (&Process{h: h}).procPid()
	if err == nil && pid <= 0 {
		err = fmt.Errorf("pidfd %d: its process has exited, or is not in /proc's PID namespace (fdinfo Pid %d): %w", fd, pid, os.ErrProcessDone)
	}
	if err != nil {
		_ = h.close()
		return nil, err
	}
	return pinned(pid, h), nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.pid }

// Signal sends sig through the pidfd. A process that has exited (zombie
// or reaped) returns an error wrapping os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return ErrClosed
	}
	err := unix.PidfdSendSignal(p.h.fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, os.ErrProcessDone)
	}
	if err != nil {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// Exited reports whether the process has exited (a zombie counts),
// without blocking. It reports false after Close.
func (p *Process) Exited() bool {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return false
	}
	exited, _ := pollExit(p.h.fd, 0)
	return exited
}

// Wait returns nil once the process has exited (a zombie counts), or
// ctx.Err() when ctx ends first. It wakes at once on either, and never
// reaps the process.
func (p *Process) Wait(ctx context.Context) error {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return ErrClosed
	}
	if exited, err := pollExit(p.h.fd, 0); exited || err != nil {
		return err
	}
	// A pipe whose write end is closed when ctx ends wakes the poll.
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return fmt.Errorf("wait for pid %d: %w", p.pid, err)
	}
	defer unix.Close(pipe[0])
	var once sync.Once
	closeW := func() { once.Do(func() { unix.Close(pipe[1]) }) }
	defer closeW()
	stop := context.AfterFunc(ctx, closeW)
	defer stop()
	for {
		timeout := -1
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(0, int(time.Until(dl).Milliseconds())+1)
		}
		fds := []unix.PollFd{{Fd: int32(p.h.fd), Events: unix.POLLIN}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for pid %d: %w", p.pid, err)
		}
		if fds[0].Revents != 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func pollExit(fd, timeoutMs int) (bool, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeoutMs)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		return n > 0, nil
	}
}

// Close releases the pidfd; calls in progress finish first. Closing twice
// is not an error.
func (p *Process) Close() error { return p.h.close() }

// Discards reports whether the kernel would discard sig sent to the process now, never
// delivering it: the process is the init of its PID namespace (the last of its NSpid is 1)
// and has no handler for sig, which it neither blocks nor is traced for. The kernel drops
// such a signal (SIGNAL_UNKILLABLE), sent from any namespace, but SIGKILL and SIGSTOP from
// an ancestor's; SIGCONT continues it all the same. Signals it ignores (SIG_IGN) are not
// said to be discarded: any process ignores those by its own choice. Nor is a signal to
// a process that waits in sigwait (rt_sigtimedwait: tini's, dumb-init's way): the signals
// it waits for are out of its blocked mask during the wait, which /proc/PID/status shows,
// and still blocked for the kernel (the mask of before the wait, kept aside), which
// delivers them to the wait. A process that has exited, or whose status or system call
// cannot be read, is not said to discard anything.
func (p *Process) Discards(sig syscall.Signal) (bool, error) {
	if sig == syscall.SIGKILL || sig == syscall.SIGSTOP || sig == syscall.SIGCONT || sig < 1 || sig > 64 {
		return false, nil
	}
	pid, err := p.procPid()
	if err != nil || pid <= 0 { // exited, or not in /proc's PID namespace: nothing to say
		return false, err
	}
	// The status between two looks at the system call: a status read while the process
	// waited in sigwait, which it entered or left around the read, is seen waiting.
	waiting, err := inSigwait(pid)
	if err != nil || waiting {
		return false, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, fmt.Errorf("status of pid %d: %w", pid, err)
	}
	if waiting, err = inSigwait(pid); err != nil || waiting {
		return false, err
	}
	// Read by PID: the status is this process's only if it had not exited by then, and
	// one alive after the read was alive during it (a zombie's PID is not reused either).
	if p.Exited() {
		return false, nil
	}
	return discards(string(data), sig)
}

// sysRtSigtimedwaitTime64 is rt_sigtimedwait_time64, a 32-bit system's sigwait with a
// 64-bit time_t; the number is that on every architecture that has it, and unused on the
// others.
const sysRtSigtimedwaitTime64 = 421

// inSigwait reports whether the thread of pid that a signal sent to the process is looked
// at by (its first, whose PID it is) waits in rt_sigtimedwait: sigwait, sigwaitinfo,
// sigtimedwait. The kernel counts the signals it waits for as blocked (real_blocked), and
// /proc/PID/status shows them unblocked (the mask it waits with): with no handler, as a
// sigwait wants them, a namespace's init was said to discard the very signal it waited
// for. A /proc/PID/syscall that cannot be read (no ptrace access) is an error.
func inSigwait(pid int) (bool, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	if err != nil {
		return false, fmt.Errorf("system call of pid %d: %w", pid, err)
	}
	return waitsForSignals(string(data)), nil
}

// waitsForSignals reports whether a /proc/PID/syscall's content says rt_sigtimedwait:
// its first field is the system call's number ("running", or -1 out of any call).
func waitsForSignals(syscallFile string) bool {
	nr, _, _ := strings.Cut(strings.TrimSpace(syscallFile), " ")
	return nr == strconv.Itoa(syscall.SYS_RT_SIGTIMEDWAIT) || nr == strconv.Itoa(sysRtSigtimedwaitTime64)
}

// procPid returns the process's PID in the PID namespace of the /proc mounted here, from
// its pidfd's fdinfo, which that /proc writes: p.pid is the PID in the caller's namespace,
// which names another process in a /proc of another namespace (a server that entered a
// PID namespace of its own and kept its parent's /proc). Zero when the process is not in
// that namespace, or the kernel does not say; negative once it has exited.
func (p *Process) procPid() (int, error) {
	p.h.mu.RLock()
	defer p.h.mu.RUnlock()
	if p.h.closed {
		return 0, ErrClosed
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", p.h.fd))
	if err != nil {
		return 0, fmt.Errorf("fdinfo of the pidfd of pid %d: %w", p.pid, err)
	}
	for line := range strings.Lines(string(data)) {
		if value, ok := strings.CutPrefix(line, "Pid:"); ok {
			return strconv.Atoi(strings.TrimSpace(value))
		}
	}
	return 0, nil
}

// discards reports whether a process whose /proc/PID/status is status has the kernel
// discard sig (see Process.Discards).
func discards(status string, sig syscall.Signal) (bool, error) {
	fields := map[string]string{}
	for line := range strings.Lines(status) {
		if name, value, ok := strings.Cut(line, ":"); ok {
			fields[name] = strings.TrimSpace(value)
		}
	}
	nspids := strings.Fields(fields["NSpid"])
	if len(nspids) == 0 || nspids[len(nspids)-1] != "1" || fields["TracerPid"] != "0" {
		return false, nil
	}
	bit := uint64(1) << (sig - 1)
	for _, name := range []string{"SigBlk", "SigCgt"} {
		mask, err := strconv.ParseUint(fields[name], 16, 64)
		if err != nil {
			return false, fmt.Errorf("status %s: %w", name, err)
		}
		if mask&bit != 0 { // blocked: pending until a handler may take it; caught: delivered
			return false, nil
		}
	}
	return true, nil
}
