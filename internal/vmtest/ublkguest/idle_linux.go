//go:build linux

package ublkguest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

const idleEnv = "DRAINKIT_GUEST_IDLE_PROCESSES"

// StartIdleProcesses starts n processes that do nothing until stop is
// called, which ends them and waits until they are reaped: a node's many
// processes, in a guest with no program to run but this one. A helper
// process, this binary started afresh, forks them (a raw fork that only
// pauses, with no Go runtime work after it), so each costs the guest the
// page tables of a small process where a fork of the test binary late in
// the suite cost 0.6 MB each, and 300 of them ran the guest out of memory.
func StartIdleProcesses(ctx context.Context, n int) (stop func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), idleEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(unix.SIGTERM)
		_ = cmd.Wait()
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("idle processes: %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = cmd.Process.Kill()
		stop()
		return nil, err
	}
	return stop, nil
}

// MaybeIdle runs the helper of StartIdleProcesses when this process is
// one: it forks the processes, says "ready", and at SIGTERM kills them,
// reaps them and exits. Each child dies with it too (PR_SET_PDEATHSIG).
func MaybeIdle() {
	v, ok := os.LookupEnv(idleEnv)
	if !ok {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	runtime.LockOSThread() // the children's parent-death signal follows this thread
	var pids []int
	for range n {
		pid, _, errno := syscall.RawSyscall(syscall.SYS_FORK, 0, 0, 0)
		if errno != 0 {
			fmt.Fprintln(os.Stderr, "idle: fork:", errno)
			break
		}
		if pid == 0 {
			syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0)
			for {
				syscall.RawSyscall(syscall.SYS_PAUSE, 0, 0, 0)
			}
		}
		pids = append(pids, int(pid))
	}
	fmt.Println("ready")
	<-term
	for _, pid := range pids {
		_ = unix.Kill(pid, unix.SIGKILL)
		_, _ = unix.Wait4(pid, nil, 0, nil)
	}
	os.Exit(0)
}
