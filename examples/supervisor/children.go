//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// A procTable starts the supervisor's children and is the only code in the
// process that reaps: it calls wait4(-1) whenever SIGCHLD arrives and
// hands each child's status to the child it belongs to; any other process
// it reaps (an orphan re-parented to PID 1 or to this subreaper) is only
// counted. Starting a child and registering its pid happen under the same
// lock as reaping, so a child that exits at once is never mistaken for an
// orphan and its status is never lost.
//
// Nothing else in the process may wait for children (no exec.Cmd.Wait, no
// os.Process.Wait): their status would be stolen by whichever waits first.
type procTable struct {
	log *slog.Logger

	mu       sync.Mutex
	children map[int]*child
	orphans  int
}

// A child is a process the supervisor started.
type child struct {
	name string
	argv []string
	proc *os.Process
	// pidNum is proc.Pid as started: Release, at the reap, overwrites
	// proc.Pid while others may read the child's PID.
	pidNum int
	done   chan struct{} // closed once reaped

	mu     sync.Mutex
	status unix.WaitStatus
	killed bool // the supervisor sent it SIGKILL
}

func newProcTable(log *slog.Logger) *procTable {
	return &procTable{log: log, children: map[int]*child{}}
}

// start starts argv as a child with the supervisor's stdio and
// environment. The child dies with the supervisor (Pdeathsig), as every
// process in a container dies with its PID 1.
func (t *procTable) start(name string, argv []string) (*child, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: empty command", name)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   childEnv(os.Environ()),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &child{name: name, argv: argv, proc: p, pidNum: p.Pid, done: make(chan struct{})}
	t.children[p.Pid] = c
	t.log.Info("supervisor: started child", "child", name, "pid", p.Pid, "argv", argv)
	return c, nil
}

// reapLoop reaps on every SIGCHLD until ctx ends. It also reaps once a
// second: SIGCHLDs coalesce, and one that arrived before Notify is not
// delivered again.
func (t *procTable) reapLoop(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		t.reap()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

// reap collects every child that has exited, without blocking.
func (t *procTable) reap() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none exited
			return
		}
		c, ok := t.children[pid]
		if !ok {
			t.orphans++
			t.log.Debug("supervisor: reaped an orphan", "pid", pid, "status", describe(ws))
			continue
		}
		delete(t.children, pid)
		c.mu.Lock()
		c.status = ws
		c.mu.Unlock()
		_ = c.proc.Release()
		close(c.done)
		t.log.Info("supervisor: child exited", "child", c.name, "pid", pid, "status", describe(ws))
	}
}

// orphanCount returns how many processes were reaped that the supervisor
// had not started.
func (t *procTable) orphanCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.orphans
}

// pid is the child's PID until the reaper has reaped it, 0 after: the
// PID may be another process's then.
func (c *child) pid() int {
	select {
	case <-c.done:
		return 0
	default:
		return c.pidNum
	}
}

// signal sends sig to the child unless it has been reaped (its pid may
// belong to another process by then).
func (c *child) signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		c.mu.Lock()
		c.killed = true
		c.mu.Unlock()
	}
	err := c.proc.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// wait returns nil once the child has been reaped, or ctx.Err().
func (c *child) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop sends SIGTERM and waits for the child until ctx ends; then it sends
// SIGKILL and waits up to killWait more. It reports how the child ended.
func (c *child) stop(ctx context.Context, killWait time.Duration) error {
	if err := c.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if c.wait(ctx) == nil {
		return c.exitErr()
	}
	_ = c.signal(syscall.SIGKILL)
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait)
	defer cancel()
	if err := c.wait(kctx); err != nil {
		return fmt.Errorf("%s did not exit by its deadline and was not reaped %v after SIGKILL", c.name, killWait)
	}
	return fmt.Errorf("%s did not exit by its deadline: killed", c.name)
}

// exitErr is nil for exit status 0 and describes any other ending.
func (c *child) exitErr() error {
	st := c.state()
	if st.Exited && st.Code == 0 {
		return nil
	}
	return fmt.Errorf("%s %s", c.name, st.String())
}

// A ChildState is how a child ended, for the Report.
type ChildState struct {
	Name   string   `json:"name"`
	Argv   []string `json:"argv"`
	Pid    int      `json:"pid"`
	Exited bool     `json:"exited"`           // reaped
	Code   int      `json:"code"`             // exit code, or 128+signal
	Signal string   `json:"signal,omitempty"` // the signal that ended it
	Killed bool     `json:"killed,omitempty"` // the supervisor sent SIGKILL
}

// String says "exited 0", "killed by signal killed" (the signal's name),
// "sent SIGKILL, not reaped", or "still running".
func (s ChildState) String() string {
	switch {
	case !s.Exited && s.Killed:
		return "sent SIGKILL, not reaped"
	case !s.Exited:
		return "still running"
	case s.Signal != "":
		return "killed by signal " + s.Signal
	default:
		return fmt.Sprintf("exited %d", s.Code)
	}
}

func (c *child) state() ChildState {
	st := ChildState{Name: c.name, Argv: c.argv, Pid: c.pidNum} // not proc.Pid: the reap's Release sets it to -1
	c.mu.Lock()
	defer c.mu.Unlock()
	// Killed whether reaped or not: a child sent SIGKILL whose exit is
	// still freeing its memory (the server step waits 50 ms for its reap)
	// read "still running", killed false, as if never killed
	// (docs/faults.md row 821).
	st.Killed = c.killed
	select {
	case <-c.done:
		st.Exited = true
	default:
		return st
	}
	switch {
	case c.status.Exited():
		st.Code = c.status.ExitStatus()
	case c.status.Signaled():
		st.Signal = c.status.Signal().String()
		st.Code = 128 + int(c.status.Signal())
	}
	return st
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

// becomeSubreaper makes orphans of the supervisor's descendants its
// children when it is not PID 1 (under tini, or in tests), so reaping
// behaves the same as in a container.
func becomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// killTree kills every process still re-parented to the supervisor (the
// orphaned descendants of its children: without this, a grandchild of the
// server outlives the supervisor when it is not PID 1, where the kernel
// would have killed it) and reaps them, within wait of its first kill,
// sparing the pids spared names (the server's device daemon: only its step
// may stop it). A killed process's own children are re-parented to the
// supervisor in turn, so it goes on until none is left or wait has passed.
// As PID 1 it does nothing: the kernel kills the whole namespace when it
// exits.
//
// wait counts from the first kill, not from the call: the scan of /proc
// that finds the descendants took 0.45-0.57 s on a loaded node (load 14-19,
// 2 cores), and with wait counted from the call two scans used it up, so
// the orphans were killed and given up on in the same moment, never reaped,
// and outlived the supervisor as zombies or still dying (1 run in 20 and 1
// in 30 of TestOrphansStillRunningAtExitAreKilled).
func (t *procTable) killTree(wait time.Duration, spared func(pid int) bool) {
	if os.Getpid() == 1 {
		return
	}
	var end time.Time // zero until the first kill
	for {
		t.reap()
		// Zombies too: done once they are reaped. A child the supervisor
		// started is left to its step (and its Pdeathsig).
		pids := slices.DeleteFunc(childPids(os.Getpid()), func(pid int) bool { return t.isChild(pid) || spared(pid) })
		if len(pids) == 0 {
			return
		}
		if end.IsZero() {
			end = time.Now().Add(wait)
		}
		for _, pid := range pids {
			t.log.Warn("supervisor: killing a descendant still running at exit", "pid", pid)
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if time.Now().After(end) {
			t.log.Error("supervisor: descendants still running at exit", "pids", pids)
			return
		}
		time.Sleep(10 * time.Millisecond) // the kill takes effect; then reap
	}
}

// isChild reports whether pid is a child the supervisor started and has
// not reaped.
func (t *procTable) isChild(pid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.children[pid]
	return ok
}

// childPids lists the processes whose parent is pid, from /proc.
func childPids(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range stats {
		n, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if st, err := procstat.Read(n); err == nil && st.PPID == pid {
			out = append(out, n)
		}
	}
	return out
}
