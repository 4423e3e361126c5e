//go:build linux

package ublkserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/frame"
)

// Mode is what a daemon process does when asked to stop, by SIGTERM or by a
// shutdown request on its socket.
type Mode string

// The daemon modes.
const (
	// Cooperative stops its devices in the safe order (Server.Stop), answers
	// a shutdown request with {"status":"ok"} first, and exits 0.
	Cooperative Mode = "cooperative"
	// Slow keeps serving for DaemonConfig.StopDelay after the request, then
	// behaves as Cooperative.
	Slow Mode = "slow"
	// Hung stops serving (new requests are held, as Server.Freeze), never
	// answers, ignores SIGTERM and never exits on its own: only SIGKILL ends
	// it. Its devices can still be stopped from outside through
	// /dev/ublk-control once no request is held; it keeps /dev/ublkcN open.
	Hung Mode = "hung"
	// Crash exits at once with status 3 on the request, leaving its devices
	// to the kernel, as a daemon that crashes mid-shutdown does. With no
	// I/O in flight the kernel then marks them DEAD; DEL_DEV remains to do.
	Crash Mode = "crash"
)

// Signals a daemon process understands besides SIGTERM.
const (
	SignalThaw   = unix.SIGUSR1 // answer held requests and serve again
	SignalFreeze = unix.SIGUSR2 // hold new requests (Server.Freeze)
)

// DaemonConfig configures a daemon process.
type DaemonConfig struct {
	Config
	Mode      Mode          // Cooperative when empty
	StopDelay time.Duration // Slow mode's delay between the request and Stop
	// Socket, when set, is the path of a Unix socket on which the daemon
	// takes shutdown requests as AgentENV does (internal/frame: a 4-byte
	// big-endian length, then {"kind":"shutdown"}), answered the same way
	// with {"status":"ok"}.
	Socket string
	// UID, when not 0, runs the daemon as this user and group, with no
	// capability (CAP_SYS_ADMIN among them): a user's server, whose
	// devices the driver adds with UBLK_F_UNPRIVILEGED_DEV only when
	// Config.Unprivileged asks and the caller lacks CAP_SYS_ADMIN (it
	// drops the flag for root). The user must be able to write
	// /dev/ublk-control and BackingDir, and gets each /dev/ublkcN once
	// the caller, as udev would, gives it the node: the daemon waits.
	UID int
}

// daemonEnv carries the JSON DaemonConfig to the re-executed binary.
const daemonEnv = "DRAINKIT_UBLKSERVER_DAEMON"

// readyFD is the child's end of the pipe on which it reports its devices.
const readyFD = 3

type readyMsg struct {
	Devices []int  `json:"devices,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Daemon is a ublk server running in its own process: this test binary,
// re-executed by StartDaemon, whose TestMain calls MaybeDaemon.
type Daemon struct {
	Cmd     *exec.Cmd // the running process; do not Wait on it, use Wait
	Devices []int     // ids N of /dev/ublkbN, live when StartDaemon returns

	waitOnce sync.Once
	exited   chan struct{}
	waitErr  error
}

// StartDaemon starts a daemon process and returns once its devices are
// live (START_DEV done), or with an error when the process fails or ctx
// ends first; in that case the process is killed. The process's output
// goes to this process's stderr.
func StartDaemon(ctx context.Context, cfg DaemonConfig) (*Daemon, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), daemonEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	if cfg.UID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(cfg.UID), Gid: uint32(cfg.UID)}}
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("ublkserver: start daemon: %w", err)
	}
	d := &Daemon{Cmd: cmd, exited: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		_ = r.SetReadDeadline(dl)
	}
	var msg readyMsg
	b, err := io.ReadAll(r)
	if err == nil {
		err = json.Unmarshal(b, &msg)
	}
	if err == nil && msg.Error != "" {
		err = errors.New(msg.Error)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = d.Wait(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("ublkserver: daemon did not get ready: %w", err)
	}
	d.Devices = msg.Devices
	return d, nil
}

// Pid returns the daemon's process id.
func (d *Daemon) Pid() int { return d.Cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped; the first
// call starts reaping.
func (d *Daemon) Exited() <-chan struct{} {
	d.waitOnce.Do(func() {
		go func() { d.waitErr = d.Cmd.Wait(); close(d.exited) }()
	})
	return d.exited
}

// Wait waits for the process to exit and returns its exit error (nil for
// status 0), or ctx's error when ctx ends first.
func (d *Daemon) Wait(ctx context.Context) error {
	select {
	case <-d.Exited():
		return d.waitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaybeDaemon runs the daemon and exits when this process was started by
// StartDaemon, and returns at once otherwise. Call it early in TestMain.
func MaybeDaemon() {
	js, ok := os.LookupEnv(daemonEnv)
	if !ok {
		return
	}
	var cfg DaemonConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ublkserver daemon:", err)
		os.Exit(2)
	}
	os.Exit(runDaemon(cfg))
}

func runDaemon(cfg DaemonConfig) int {
	ready := os.NewFile(readyFD, "ready")
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, SignalThaw, SignalFreeze)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	srv, err := Start(ctx, cfg.Config)
	cancel()
	if err != nil {
		_ = json.NewEncoder(ready).Encode(readyMsg{Error: err.Error()})
		return 1
	}
	requests := make(chan net.Conn)
	if cfg.Socket != "" {
		l, err := net.Listen("unix", cfg.Socket)
		if err != nil {
			_ = json.NewEncoder(ready).Encode(readyMsg{Error: err.Error()})
			return 1
		}
		go acceptShutdowns(l, requests)
	}
	_ = json.NewEncoder(ready).Encode(readyMsg{Devices: srv.Devices()})
	ready.Close()
	return daemonLoop(cfg, srv, sigs, requests)
}

// daemonLoop waits for a stop request and acts on it according to the mode.
func daemonLoop(cfg DaemonConfig, srv *Server, sigs <-chan os.Signal, requests <-chan net.Conn) int {
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case SignalThaw:
				srv.Thaw()
				continue
			case SignalFreeze:
				srv.Freeze()
				continue
			}
		case c := <-requests:
			if cfg.Mode == Hung {
				// Never answer; keep the connection open until the peer goes.
				go func() { _, _ = io.Copy(io.Discard, c) }()
			} else {
				answer(c)
			}
		case <-srv.Done():
			// Stopped from outside. A working daemon cleans up and exits;
			// a hung one keeps its files open until it is killed.
			if cfg.Mode == Hung {
				for range sigs { // until SIGKILL
				}
			}
			return exitCode(srv.Stop(context.Background()))
		}
		switch cfg.Mode {
		case Hung:
			srv.Freeze()
			continue
		case Crash:
			fmt.Fprintln(os.Stderr, "ublkserver daemon: crashing on purpose")
			os.Exit(3)
		case Slow:
			time.Sleep(cfg.StopDelay)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := srv.Stop(ctx)
		cancel()
		return exitCode(err)
	}
}

func exitCode(err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, "ublkserver daemon: stop:", err)
		return 1
	}
	return 0
}

// acceptShutdowns passes every connection that sent a shutdown request.
func acceptShutdowns(l net.Listener, requests chan<- net.Conn) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			if readRequest(c) == "shutdown" {
				requests <- c
				return
			}
			c.Close()
		}()
	}
}

// readRequest reads one request frame and returns its kind ("" for a bad frame).
func readRequest(c net.Conn) string {
	var req struct {
		Kind string `json:"kind"`
	}
	_ = frame.Read(c, &req)
	return req.Kind
}

func answer(c net.Conn) {
	defer c.Close()
	_ = frame.Write(c, map[string]string{"status": "ok"})
}
