//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/proc"
	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/ublk"
)

// ownedDaemon is the server's own ublk daemon (-daemon-socket): AgentENV
// spawns uvm-ublk-daemon as its child, so the supervisor neither starts it
// nor may reap it while the server lives. It is found through its socket:
// the peer credentials (SO_PEERCRED) of a connection name the process that
// listens, which must be a descendant of the server (or, once the server is
// gone, of the supervisor, which the orphan is re-parented to). From then
// on a pidfd pins it, so a signal never reaches another process that
// reused its pid, and its exit is seen without reaping it.
//
// It is a ublk.Daemon: RequestStop sends {"kind":"shutdown"} over the
// socket (no answer followed by the exit counts as delivered), Wait polls
// the pidfd, Kill sends SIGKILL through it. The ublk teardown applies its
// rules (holders, kernel table, last resort) to it as to a daemon the
// supervisor owns.
type ownedDaemon struct {
	path   string
	log    *slog.Logger
	server func() (pid int, alive bool) // the server's pid, and whether it has not been reaped

	mu    sync.Mutex
	proc  *ublk.Process
	sock  *ublk.Socket
	pid   int
	argv  []string
	found time.Time
}

// ownedPoll is how often the daemon is looked for until it is found.
const ownedPoll = 100 * time.Millisecond

func newOwnedDaemon(path string, log *slog.Logger, server func() (int, bool)) *ownedDaemon {
	return &ownedDaemon{path: path, log: log, server: server}
}

// watch looks for the daemon every 100 ms until it is found or ctx ends:
// the server starts it some time after its own start.
func (o *ownedDaemon) watch(ctx context.Context) {
	t := time.NewTicker(ownedPoll)
	defer t.Stop()
	for {
		if o.find() == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// find finds the daemon through its socket; nil when it is known. A daemon
// found before that has exited is replaced by the one listening now, if
// any (a server may start its daemon again); if none listens, the exited
// one stays, so that Wait and the Report see its exit.
func (o *ownedDaemon) find() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.proc != nil && !o.proc.Exited() {
		return nil
	}
	pid, listener, err := peer(o.path)
	switch {
	case err != nil && o.proc != nil:
		return nil
	case err != nil:
		return err
	}
	if listener != nil {
		defer listener.Close()
	}
	if o.proc != nil && pid == o.pid {
		return nil
	}
	server, alive := o.server()
	if !o.ours(pid, server, alive) {
		return fmt.Errorf("the process listening on %s (pid %d) is neither a descendant of the server (pid %d) nor an orphan of it", o.path, pid, server)
	}
	findHook(pid)
	proc, err := ublk.FindProcess(pid)
	if err != nil {
		return err
	}
	// The pidfd pins pid; check again that it is the listener, still in the server's
	// tree: a listener that exited since its pid was read left that pid to another
	// process, which the pidfd may have pinned, and which, the server's too (a helper it
	// started), passes the tree's check.
	if !o.ours(pid, server, alive) || !stillListening(o.path, pid, listener) {
		proc.Close()
		return fmt.Errorf("pid %d exited while it was being found", pid)
	}
	sock := &ublk.Socket{Path: o.path, Process: proc}
	if o.proc != nil {
		o.log.Info("supervisor: the server's daemon was replaced", "old_pid", o.pid, "pid", pid)
		o.proc.Close()
	}
	o.proc, o.sock, o.pid, o.found = proc, sock, pid, time.Now()
	o.argv = cmdline(pid)
	o.log.Info("supervisor: found the server's daemon by its socket", "socket", o.path, "pid", pid, "argv", o.argv)
	return nil
}

// findHook is a test's: find calls it with the listener's PID once it has checked it,
// before it pins it.
var findHook = func(int) {}

// ours reports whether pid is in the server's tree: a descendant of the
// server while it runs, or an orphan of it, re-parented to the supervisor
// (a daemon that double-forked, or any once the server has exited).
func (o *ownedDaemon) ours(pid, server int, alive bool) bool {
	if pid == server || pid == os.Getpid() {
		return false
	}
	if alive && descends(pid, server) {
		return true
	}
	return descends(pid, os.Getpid())
}

// socket returns the daemon's Socket, looking for the daemon once more if
// it is not known yet; without it, a Socket with no process, which sees the
// daemon's exit as its socket refusing connections.
func (o *ownedDaemon) socket() *ublk.Socket {
	if err := o.find(); err != nil {
		o.log.Warn("supervisor: the server's daemon not found by its socket", "socket", o.path, "err", err)
		return &ublk.Socket{Path: o.path}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sock
}

// RequestStop implements ublk.Daemon. A daemon never found whose socket
// refuses connections is not running: there is nothing to ask.
func (o *ownedDaemon) RequestStop(ctx context.Context) error {
	s := o.socket()
	if st := o.state(); st.Exited {
		o.log.Info("supervisor: the server's daemon has already exited; nothing to ask", "pid", st.Pid)
		return nil
	}
	err := s.RequestStop(ctx)
	if err != nil && o.pidOrZero() == 0 && refused(err) {
		o.log.Info("supervisor: the server's daemon is not running (its socket refuses connections)", "socket", o.path)
		return nil
	}
	return err
}

// Wait implements ublk.Daemon.
func (o *ownedDaemon) Wait(ctx context.Context) error { return o.socket().Wait(ctx) }

// Kill implements ublk.Daemon: SIGKILL through the pidfd, or ErrCannotKill
// for a daemon never found.
func (o *ownedDaemon) Kill(ctx context.Context) error { return o.socket().Kill(ctx) }

// Pid is the daemon's process ID for the daemon step's guards
// (ublk.DaemonFuncs.PidFunc): 0 when it is not found or has exited (its PID
// may be another process's then).
func (o *ownedDaemon) Pid() int {
	if o.find() != nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.proc == nil || o.proc.Exited() {
		return 0
	}
	return o.pid
}

func (o *ownedDaemon) pidOrZero() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pid
}

// An OwnedDaemonState is the server's daemon as the Report shows it.
type OwnedDaemonState struct {
	Socket string    `json:"socket"`
	Pid    int       `json:"pid,omitempty"` // 0: never found
	Argv   []string  `json:"argv,omitempty"`
	Found  time.Time `json:"found,omitzero"`
	Exited bool      `json:"exited"`
}

func (o *ownedDaemon) state() *OwnedDaemonState {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := &OwnedDaemonState{Socket: o.path, Pid: o.pid, Argv: o.argv, Found: o.found}
	if o.proc != nil {
		st.Exited = o.proc.Exited()
	}
	return st
}

func (o *ownedDaemon) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.proc != nil {
		o.proc.Close()
	}
}

// stillListening reports whether pid, pinned by a pidfd opened by that pid after it was
// read, is the listener on path: listener (pinned by the socket itself, SO_PEERPIDFD)
// still runs, so pid has named it from its read to now, and the pidfd opened by it in
// between pins it. Where the kernel pins no listener (before Linux 6.5), the socket is
// asked again: it still says pid, whose process the pidfd holds.
func stillListening(path string, pid int, listener *proc.Process) bool {
	if listener != nil {
		return listener.Pid() == pid && !listener.Exited()
	}
	again, err := peerPid(path)
	return err == nil && again == pid
}

// soPeerPidfd is SO_PEERPIDFD (Linux 6.5), which x/sys/unix does not name yet: a pidfd
// of a Unix socket's peer, the process that listens on it for a connecting socket.
const soPeerPidfd = 77

// peer is peerPid that also pins the listener, by the socket itself (SO_PEERPIDFD), not
// by its pid, which another process may have taken once the listener exited: nil where
// the kernel has no SO_PEERPIDFD. The caller closes it.
func peer(path string) (int, *proc.Process, error) {
	var pinned *proc.Process
	pid, err := peerCred(path, func(fd int) error {
		pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soPeerPidfd)
		if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EINVAL) {
			return nil // an older kernel: nothing pinned
		}
		if err != nil {
			return fmt.Errorf("SO_PEERPIDFD on %s: %w", path, err)
		}
		pinned, err = proc.Adopt(pidfd)
		return err
	})
	if err != nil {
		if pinned != nil {
			pinned.Close()
		}
		return 0, nil, err
	}
	return pid, pinned, nil
}

// peerPid connects to the Unix socket at path and returns the pid in its
// peer credentials: the process that listens on it. The connection is
// closed without a request.
func peerPid(path string) (int, error) { return peerCred(path, nil) }

// peerCred is peerPid, which calls also, when not nil, with the connection's socket
// before it is closed.
func peerCred(path string, also func(fd int) error) (int, error) {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	var aerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil && also != nil {
			aerr = also(int(fd))
		}
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED on %s: %w", path, cerr)
	}
	if aerr != nil {
		return 0, aerr
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("SO_PEERCRED on %s: no pid (the listener is in another pid namespace)", path)
	}
	return int(cred.Pid), nil
}

// descends reports whether pid is a descendant of ancestor, from the
// parent links in /proc.
func descends(pid, ancestor int) bool {
	for range 64 { // deeper than any process tree in a container
		st, err := procstat.Read(pid)
		if err != nil || st.PPID <= 0 {
			return false
		}
		if st.PPID == ancestor {
			return true
		}
		pid = st.PPID
	}
	return false
}

// cmdline returns the argv of pid, for the Report.
func cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// refused reports whether err is a connection to a socket nobody listens
// on (or that does not exist).
func refused(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT)
}
