package fakeublk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/frame"
)

// Mode is how a fake daemon reacts to a stop request.
type Mode string

const (
	// Cooperative stops its devices one by one, Step apart, and exits 0.
	Cooperative Mode = "cooperative"
	// Slow is Cooperative with a long Step (default 1 s per device).
	Slow Mode = "slow"
	// Hung ignores SIGTERM and never answers a request; only SIGKILL ends
	// it, and its devices stay live.
	Hung Mode = "hung"
	// Crash stops CrashAfter devices, then exits with status 3, leaving
	// the rest of its devices in the tree (live), as a daemon that crashes
	// mid-teardown does.
	Crash Mode = "crash"
)

// EnvDaemon is the environment variable that makes MainIfDaemon run a fake
// daemon; its value is the DaemonConfig as JSON.
const EnvDaemon = "FAKEUBLK_DAEMON"

// CrashStatus is the exit status of a daemon in Crash mode.
const CrashStatus = 3

// DaemonConfig configures a fake device daemon.
type DaemonConfig struct {
	// SysRoot is the fake sysfs root (a Tree's Root); required.
	SysRoot string `json:"sys_root"`
	// Devices are created live at start.
	Devices []DeviceSpec `json:"devices"`
	// Socket, if set, is the Unix socket path the daemon listens on for
	// length-prefixed JSON requests (4-byte big-endian length, then
	// {"kind":"shutdown"}, answered by {"status":"ok"}).
	Socket string `json:"socket,omitempty"`
	// Mode is the behaviour on a stop request; default Cooperative.
	Mode Mode `json:"mode,omitempty"`
	// Silent makes the daemon act on a shutdown request without answering
	// it: it holds the connection open until it exits, as a daemon that
	// answers only once it is done would (AgentENV's answers at once, then
	// stops its devices).
	Silent bool `json:"silent,omitempty"`
	// StopWithParent makes the daemon stop its devices and exit, as on a
	// shutdown request, once its parent process has exited (it is
	// re-parented), as AgentENV's daemon does when its parent's pidfd
	// becomes readable.
	StopWithParent bool `json:"stop_with_parent,omitempty"`
	// Step is the pause before each device is stopped and again before it
	// is deleted; default 20 ms (1 s in Slow mode).
	Step time.Duration `json:"step,omitempty"`
	// Linger keeps the daemon up after it deleted its Devices, until it is
	// killed, as a daemon that still serves a disk beyond them does (it
	// logs "linger" then, and never "exit").
	Linger bool `json:"linger,omitempty"`
	// CrashAfter is how many devices a Crash-mode daemon removes before it
	// dies; default 1.
	CrashAfter int `json:"crash_after,omitempty"`
	// EventLog, if set, is a file the daemon appends one line to per event
	// ("start", "sigterm", "request shutdown", "stop N", "delete N",
	// "crash", "exit"), so a test can tell what it was asked to do.
	EventLog string `json:"event_log,omitempty"`
}

func (c DaemonConfig) withDefaults() (DaemonConfig, error) {
	if c.SysRoot == "" {
		return c, errors.New("fakeublk: DaemonConfig.SysRoot is required")
	}
	if c.Mode == "" {
		c.Mode = Cooperative
	}
	switch c.Mode {
	case Cooperative, Slow, Hung, Crash:
	default:
		return c, fmt.Errorf("fakeublk: DaemonConfig.Mode %q unknown", c.Mode)
	}
	if c.Step <= 0 {
		c.Step = 20 * time.Millisecond
		if c.Mode == Slow {
			c.Step = time.Second
		}
	}
	if c.CrashAfter <= 0 {
		c.CrashAfter = 1
	}
	return c, nil
}

// MainIfDaemon runs a fake daemon and exits the process when EnvDaemon is
// set, and returns at once otherwise. Call it first in TestMain (or main)
// of any binary that starts fake daemons with Start:
//
//	func TestMain(m *testing.M) {
//		fakeublk.MainIfDaemon()
//		goleak.VerifyTestMain(m)
//	}
func MainIfDaemon() {
	raw := os.Getenv(EnvDaemon)
	if raw == "" {
		return
	}
	var cfg DaemonConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "fakeublk:", err)
		os.Exit(2)
	}
	os.Exit(RunDaemon(cfg, os.Stdout))
}

// RunDaemon runs a fake daemon in this process until it has stopped its
// devices (or crashed, in Crash mode) and returns the exit status. It
// writes "ready\n" to ready once the devices exist, the socket listens and
// SIGTERM is handled. It installs signal handlers, so it is meant for a
// process of its own (MainIfDaemon).
func RunDaemon(cfg DaemonConfig, ready io.Writer) int {
	d, err := newDaemon(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return d.run(ready)
}

type daemon struct {
	cfg   DaemonConfig
	tree  *Tree
	chars map[int]*os.File // by device ID: the char device nodes it holds, as a server holds /dev/ublkcN
	ln    net.Listener
	stop  chan string
	once  sync.Once
	log   sync.Mutex

	stopping atomic.Bool // its accept loop has ended
	heldMu   sync.Mutex
	held     []net.Conn // connected once it was stopping: never read
}

func newDaemon(cfg DaemonConfig) (*daemon, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	tree, err := NewTree(cfg.SysRoot)
	if err != nil {
		return nil, err
	}
	chars := map[int]*os.File{}
	for _, spec := range cfg.Devices {
		if err := tree.AddDevice(spec); err != nil {
			return nil, err
		}
		if spec.CharMajor != 0 {
			f, err := tree.openChar(spec)
			if err != nil {
				return nil, err
			}
			chars[spec.ID] = f
		}
	}
	d := &daemon{cfg: cfg, tree: tree, chars: chars, stop: make(chan string, 1)}
	if cfg.Socket != "" {
		_ = os.Remove(cfg.Socket)
		if d.ln, err = net.Listen("unix", cfg.Socket); err != nil {
			return nil, fmt.Errorf("fakeublk: %w", err)
		}
		// Owner-only: whoever connects may stop the daemon.
		if err = os.Chmod(cfg.Socket, 0o600); err != nil {
			d.ln.Close()
			return nil, fmt.Errorf("fakeublk: %w", err)
		}
	}
	return d, nil
}

func (d *daemon) event(format string, args ...any) {
	if d.cfg.EventLog == "" {
		return
	}
	d.log.Lock()
	defer d.log.Unlock()
	f, err := os.OpenFile(d.cfg.EventLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, format+"\n", args...)
	f.Close()
}

func (d *daemon) trigger(why string) {
	d.once.Do(func() {
		d.stopping.Store(true)
		d.stop <- why
	})
}

func (d *daemon) run(ready io.Writer) int {
	sig := make(chan os.Signal, 1)
	if d.cfg.Mode == Hung {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	} else {
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	}
	if d.ln != nil {
		go d.serve()
	}
	d.event("start")
	fmt.Fprintln(ready, "ready")
	go func() {
		for range sig {
			d.event("sigterm")
			d.trigger("sigterm")
		}
	}()
	if d.cfg.StopWithParent {
		go d.watchParent(os.Getppid())
	}
	<-d.stop
	if d.cfg.Mode == Hung {
		select {} // only SIGKILL ends a hung daemon
	}
	return d.teardown()
}

// watchParent triggers the stop once the process's parent is no longer
// ppid.
func (d *daemon) watchParent(ppid int) {
	for os.Getppid() == ppid {
		time.Sleep(20 * time.Millisecond)
	}
	d.event("parent exited")
	d.trigger("parent exited")
}

func (d *daemon) teardown() int {
	for i, spec := range d.cfg.Devices {
		if d.cfg.Mode == Crash && i == d.cfg.CrashAfter {
			d.event("crash")
			return CrashStatus // devices from here on stay live
		}
		time.Sleep(d.cfg.Step)
		_ = d.tree.SetInflight(spec.ID, 0, 0) // the live queues drain the in-flight I/O
		_ = d.tree.StopDevice(spec.ID)
		d.event("stop %d", spec.ID)
		time.Sleep(d.cfg.Step)
		if f := d.chars[spec.ID]; f != nil {
			f.Close() // a server closes /dev/ublkcN before DEL_DEV
		}
		_ = d.tree.DeleteDevice(spec.ID)
		d.event("delete %d", spec.ID)
	}
	if d.cfg.Linger {
		d.event("linger")
		select {} // only a kill ends it
	}
	if d.ln != nil {
		d.ln.Close()
	}
	d.event("exit")
	return 0
}

// serve handles each connection until the daemon stops. From then on, as
// AgentENV's daemon, whose accept loop ends when its shutdown begins (a
// request, SIGTERM, its parent's exit) while its socket stays bound until
// its devices are gone, a connection is taken and never read nor answered:
// it waits, as in the real one's backlog, until the process exits.
func (d *daemon) serve() {
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		if d.stopping.Load() {
			d.event("connection unread: stopping")
			d.heldMu.Lock()
			d.held = append(d.held, c) // kept: a collected conn would be closed
			d.heldMu.Unlock()
			continue
		}
		go d.handle(c)
	}
}

// handle answers one request per connection, as AgentENV's daemon does.
func (d *daemon) handle(c net.Conn) {
	var req struct {
		Kind string `json:"kind"`
	}
	if err := frame.Read(c, &req); err != nil {
		c.Close()
		return
	}
	d.event("request %s", req.Kind)
	if d.cfg.Mode == Hung {
		return // keep the connection open and never answer
	}
	if req.Kind == "shutdown" && d.cfg.Silent {
		d.trigger("request") // the connection closes when the process exits
		return
	}
	defer c.Close()
	switch req.Kind {
	case "shutdown":
		// Stopping first, then the answer, as AgentENV's (notify_one, then
		// send_message): a request sent after the answer is never read.
		d.trigger("request")
		_ = frame.Write(c, map[string]string{"status": "ok"})
	case "status":
		_ = frame.Write(c, map[string]any{"status": "ok", "devices": d.tree.Devices()})
	default:
		_ = frame.Write(c, map[string]string{"status": "error", "message": "unknown kind " + req.Kind}) // AgentENV names the reason "message"
	}
}

// Child is a fake daemon running as a child process.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a fake daemon as a child process by re-executing the
// current binary (os.Args[0]) with EnvDaemon set; that binary must call
// MainIfDaemon first thing. Start returns once the daemon has created its
// devices and handles SIGTERM and requests, or fails when ctx ends first
// (the child is then killed). The daemon's stderr goes to this process's; a
// daemon that exits before it is ready fails Start with what it wrote there,
// its reason. The child is killed by the kernel if this process dies (Linux).
// Call Close when done with it.
func Start(ctx context.Context, cfg DaemonConfig) (*Child, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvDaemon+"="+string(raw))
	why := &stderrTail{}
	cmd.Stderr = why
	setPdeathsig(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fakeublk: start daemon: %w", err)
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	readyc := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("fakeublk: daemon said %q", line)
		}
		readyc <- err
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait() // the status is in cmd.ProcessState
		close(c.done)
	}()
	select {
	case err := <-readyc:
		if err != nil {
			c.Close() // reaped: all it wrote is in why
			return nil, notReady(err, c.State(), why.String())
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}

// notReady is Start's error for a daemon that did not say ready (err) and exited so
// (state), having written stderr: its own reason, where a daemon that could not bind its
// socket failed its caller's start with "daemon not ready: EOF" and the reason was in the
// log alone, never in a server's termination message (docs/faults.md row 1391).
func notReady(err error, state, stderr string) error {
	if stderr = strings.TrimSpace(stderr); stderr == "" {
		return fmt.Errorf("fakeublk: daemon not ready (%s): %w", state, err)
	}
	return fmt.Errorf("fakeublk: daemon not ready (%s): %w: %s", state, err, stderr)
}

// stderrTail is a daemon's stderr: passed on to this process's, its last tailMax bytes
// kept for the error of a start that fails.
type stderrTail struct {
	mu   sync.Mutex
	tail []byte
}

// tailMax is how much of a daemon's stderr a stderrTail keeps: its last lines.
const tailMax = 1024

// Write passes p on to os.Stderr and keeps it; it never fails, so that a stderr this
// process cannot write never fails the daemon's.
func (w *stderrTail) Write(p []byte) (int, error) {
	_, _ = os.Stderr.Write(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, p...)
	if len(w.tail) > tailMax {
		w.tail = w.tail[len(w.tail)-tailMax:]
	}
	return len(p), nil
}

// String returns what was kept.
func (w *stderrTail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.tail)
}

// Pid returns the daemon's process ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the daemon has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// ExitCode returns the daemon's exit status: -1 while it runs or when it
// was killed by a signal.
func (c *Child) ExitCode() int {
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// State says how the daemon exited, as os.ProcessState does ("exit status 0",
// "signal: killed"); "running" while it runs.
func (c *Child) State() string {
	select {
	case <-c.done:
		return c.cmd.ProcessState.String()
	default:
		return "running"
	}
}

// Signaled reports whether the daemon exited because of signal s.
func (c *Child) Signaled(s syscall.Signal) bool {
	select {
	case <-c.done:
		ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == s
	default:
		return false
	}
}

// Close kills the daemon if it still runs and waits until it is reaped.
func (c *Child) Close() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Kill()
	<-c.done
}
