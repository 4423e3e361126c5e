package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// A Child is a real child process in a container of its own, as the
// kubelet's container runs: PID 1 of a PID namespace of its own, with that
// namespace's /proc, where this process may make one (PIDNamespace); a cgroup where this process may make one and
// start a process in it (root), which every process the child starts is in, whatever process
// group or session it moves to: cgroup v2's where it is mounted (a pure
// v2 node, or the unified mount beside v1's) and the kernel forks into it
// (Linux 5.7), else cgroup v1's pids hierarchy; and a process group of
// its own. Kill SIGKILLs the whole container, as the container runtime's
// SIGKILL takes the whole container cgroup (daemons, VMMs and runsc
// commands included): on v2 with cgroup.kill (Linux 5.14), or frozen and
// each process SIGKILLed, as runc does; and when the child exits, whatever is
// left of it is killed, as a container stops with its main process (its
// PID namespace ends). Without a cgroup, the container is the process
// group alone: a process that left it (setsid, a double fork, a group of
// its own) outlives the child.
type Child struct {
	Cmd       *exec.Cmd // the started command; read its ProcessState once Exited is closed
	exited    chan struct{}
	err       error // from Wait; read after exited is closed
	container *container
	pid1      bool // PID 1 of a PID namespace of its own
	// mu orders the reaping of the child and Kill's SIGKILL of its process
	// group: once reaped, its PID, the group's ID, may be another process's.
	mu     sync.Mutex
	reaped bool
}

// Start starts cmd in a container of its own, as PID 1 of its PID namespace
// where it can be (Child.PID1), and reaps it when it exits. It returns once
// cmd's program runs, or with the error os/exec's Start gives a program
// that cannot. A cmd that starts as PID 1 is started through this binary,
// which mounts the namespace's /proc and execs cmd's program in its place,
// with cmd's argv, environment and descriptors, as a container runtime's
// init does.
func Start(cmd *exec.Cmd) (*Child, error) { return start(cmd, hierarchies()) }

// start starts cmd in a container of its own, a cgroup in the first of hs
// where one can be made.
func start(cmd *exec.Cmd, hs []hierarchy) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	inOwnProcessGroup(cmd.SysProcAttr)
	started, err := asPID1(cmd)
	if err != nil {
		return nil, err
	}
	c := &Child{Cmd: cmd, exited: make(chan struct{}), pid1: started != nil}
	ct, err := startContained(hs, cmd, c.reap)
	if started != nil {
		err = started(err)
	}
	if err != nil {
		if ct != nil { // started as PID 1, its program not: gone at once
			<-c.exited
			_, _ = ct.kill()
		}
		return nil, err
	}
	c.container = ct
	return c, nil
}

// reap waits for the child to exit and reaps it, Kill's SIGKILL of its
// process group not under way: the exit is waited for first, the child
// left a zombie, so that the reaping waits for that SIGKILL alone, never
// for the rest of Kill.
func (c *Child) reap() {
	awaitExit(c.Cmd.Process.Pid)
	c.mu.Lock()
	err := c.Cmd.Wait()
	c.reaped = true
	c.mu.Unlock()
	c.err = err
	close(c.exited)
}

// PID1 reports whether the child runs as PID 1 of a PID namespace of its
// own, as a pod's container does (PIDNamespace says why not).
func (c *Child) PID1() bool { return c.pid1 }

// Cgroup returns the directory of the child's container's cgroup while the
// child runs; "" where none could be made (not root, no cgroup hierarchy
// the simulator can use), the container then its process group alone.
func (c *Child) Cgroup() string { return c.container.cgroup() }

// Signal sends sig to the child.
func (c *Child) Signal(sig os.Signal) error { return c.Cmd.Process.Signal(sig) }

// Kill sends SIGKILL to every process of the child's container, and to its
// process group while the child is not reaped: once it is, its PID, the
// group's ID, may be another process's, the leader of a group of its own
// (docs/faults.md row 2461). A container already gone is not an error.
func (c *Child) Kill() error {
	if _, err := c.container.kill(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reaped {
		return nil
	}
	err := killProcessGroup(c.Cmd.Process.Pid)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Exited is closed once the child has exited and was reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err returns what Wait returned; valid once Exited is closed.
func (c *Child) Err() error {
	<-c.exited
	return c.err
}

// HTTPGet is an httpGet preStop hook: one GET to URL, as the kubelet makes
// it. Only a failed request is an error: the kubelet does not check the
// status, which Terminate records in Timeline.HookStatus.
type HTTPGet struct {
	URL    string       // the hook's URL, e.g. http://127.0.0.1:8080/drain
	Client *http.Client // nil: a new http.Client
	Header http.Header  // the hook's httpHeaders, e.g. a drain secret
}

// Run makes the request, bounded by ctx.
func (h HTTPGet) Run(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return err
	}
	for k, v := range h.Header {
		req.Header[k] = v
	}
	client := h.Client
	if client == nil {
		client = &http.Client{}
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	recordStatus(ctx, resp.StatusCode)
	return nil
}

// Exec is an exec preStop hook: a command run to completion. Like the
// kubelet, the simulator never cuts it at the grace period; it is killed
// once the process has exited, as a real one dies with its container:
// with every process it started (it runs in a process group of its own,
// which is SIGKILLed whole).
type Exec struct {
	Path string   // the command
	Args []string // its arguments
	Env  []string // nil: the simulator's environment
}

// Run runs the command, bounded by ctx.
func (e Exec) Run(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, e.Path, e.Args...)
	cmd.Env = e.Env
	cmd.SysProcAttr = inOwnProcessGroup(&syscall.SysProcAttr{})
	cmd.Cancel = func() error { return killProcessGroup(cmd.Process.Pid) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("preStop exec %s: %w: %s", e.Path, err, out)
	}
	return nil
}

// Sleep is a sleep preStop hook (lifecycle.preStop.sleep.seconds, KEP-3960):
// the kubelet itself waits, so the container never sees T0, and SIGTERM
// leaves grace - the sleep.
type Sleep time.Duration

// Run waits the sleep's length, or until ctx ends.
func (s Sleep) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Duration(s))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
