package fakeagentenv

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/frame"
)

// EnvAPIKey is the environment variable Main reads the API key from (a key
// never goes on a command line).
const EnvAPIKey = "FAKEAGENTENV_API_KEY"

// Ways Main's shutdown treats its daemon (-stop-daemon).
const (
	// StopWait sends the shutdown request and waits for the daemon's exit:
	// AgentENV since it waits for the exit.
	StopWait = "wait"
	// StopSend sends the request and exits without waiting: AgentENV
	// before that change.
	StopSend = "send"
	// StopLeave leaves the daemon running: a server that dies without its
	// cleanup.
	StopLeave = "leave"
)

// Main runs the server as a process, the way AgentENV's server runs: it
// spawns its ublk daemon as its own child (-daemon, split on spaces) and
// waits until the daemon's socket (-daemon-socket) answers, seeds
// -sandboxes running sandboxes, serves the API on -listen, and on SIGTERM
// or SIGINT, as AgentENV's server (src/bin/server.rs: axum's graceful
// shutdown beside a cleanup task started by the same signal), stops
// accepting connections and at once, while the requests in flight finish,
// runs Shutdown (pausing what is still running, one at a time), asks the
// daemon to stop over its socket (4-byte big-endian length,
// {"kind":"shutdown"}; the answer is read, 5 s at most, and whatever it is
// the server goes on, as AgentENV's client, storage/ublk-daemon/src/client.rs)
// and waits up to 30 s for its exit; then it closes the connections that never sent a request (as
// hyper's graceful shutdown does; net/http's Shutdown would wait 5 s for
// each), waits for the requests in flight, and exits 0. The API key comes
// from EnvAPIKey.
//
// Flags: -listen ADDR, -state DIR, -sandboxes N (memoryMB cycling through
// 512, 1024, 2048, 4096), -page-size N, -no-v2, -pause-base D,
// -pause-per-gib D, -fail-first N, -resume-when-none-running N (see
// Config.ResumeWhenNoneRunning), -daemon "CMD ARGS", -daemon-socket PATH,
// -stop-daemon wait|send|leave.
func Main(args []string, stderr io.Writer) int {
	lg := log.New(stderr, "fakeagentenv: ", log.Lmicroseconds)
	fs := flag.NewFlagSet("fakeagentenv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	listen := fs.String("listen", "127.0.0.1:8000", "API address")
	fs.StringVar(&cfg.StateDir, "state", "", "state directory for paused records")
	seed := fs.Int("sandboxes", 0, "running sandboxes to create at start")
	fs.IntVar(&cfg.PageSize, "page-size", DefaultPageSize, "default page size of GET /v2/sandboxes")
	fs.BoolVar(&cfg.NoV2, "no-v2", false, "GET /v2/sandboxes answers 404")
	fs.DurationVar(&cfg.PauseBase, "pause-base", 20*time.Millisecond, "fixed part of a pause")
	fs.DurationVar(&cfg.PausePerGiB, "pause-per-gib", 20*time.Millisecond, "pause time per GiB of memoryMB")
	fs.IntVar(&cfg.FailFirst, "fail-first", 0, "first pause of every Nth sandbox answers 500")
	fs.IntVar(&cfg.ResumeWhenNoneRunning, "resume-when-none-running", 0, "users resume N paused sandboxes after the first listing that finds none running")
	daemon := fs.String("daemon", "", "ublk daemon command, spawned as a child")
	socket := fs.String("daemon-socket", "", "the daemon's Unix socket")
	stopMode := fs.String("stop-daemon", StopWait, "wait, send or leave")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch *stopMode {
	case StopWait, StopSend, StopLeave:
	default:
		lg.Printf("-stop-daemon %q: want wait, send or leave", *stopMode)
		return 2
	}
	cfg.APIKey = os.Getenv(EnvAPIKey)
	srv, err := New(cfg)
	if err != nil {
		lg.Print(err)
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	var d *exec.Cmd
	exited := make(chan error, 1)
	if argv := strings.Fields(*daemon); len(argv) > 0 {
		d = exec.Command(argv[0], argv[1:]...)
		d.Stdout, d.Stderr = stderr, stderr
		if err := d.Start(); err != nil {
			lg.Printf("daemon: %v", err)
			return 1
		}
		go func() { exited <- d.Wait() }()
		if err := waitSocket(*socket, 10*time.Second); err != nil {
			lg.Printf("daemon: %v", err)
			_ = d.Process.Kill()
			<-exited
			return 1
		}
		lg.Printf("daemon pid %d up on %s", d.Process.Pid, *socket)
	}
	for i := range *seed {
		if _, err := srv.Create(512 << (i % 4)); err != nil {
			lg.Print(err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		lg.Print(err)
		return 1
	}
	var unused sync.Map // net.Conn -> struct{}: connections that have sent no request yet
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				unused.Store(c, struct{}{})
			} else {
				unused.Delete(c)
			}
		}}
	go func() { _ = hs.Serve(ln) }()
	lg.Printf("serving on %s", ln.Addr())

	sig := <-sigs
	lg.Printf("%v: shutting down", sig)
	drained := make(chan struct{})
	go func() { // stop accepting; requests in flight finish, beside the cleanup
		defer close(drained)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}()
	cleanup(lg, srv, d, exited, *socket, *stopMode)
	n := 0
	unused.Range(func(c, _ any) bool { n++; _ = c.(net.Conn).Close(); return true })
	if n > 0 {
		lg.Printf("closed %d connection(s) that never sent a request", n)
	}
	<-drained
	return 0
}

// cleanup is AgentENV's shutdown task: the orchestrator's shutdown, then
// the daemon's.
func cleanup(lg *log.Logger, srv *Server, d *exec.Cmd, exited <-chan error, socket, stopMode string) {
	lg.Printf("shutdown paused %d sandboxes", srv.Shutdown())
	if d == nil || stopMode == StopLeave {
		return
	}
	if err := requestShutdown(socket); err != nil {
		lg.Printf("daemon: shutdown request: %v", err)
	}
	if stopMode == StopSend {
		return
	}
	select {
	case err := <-exited:
		lg.Printf("daemon exited: %v", err)
	case <-time.After(30 * time.Second):
		lg.Printf("daemon did not exit within 30s")
	}
}

// waitSocket waits until the Unix socket at path accepts connections.
func waitSocket(path string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("socket %s not up after %v: %w", path, within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requestShutdown sends {"kind":"shutdown"} on a connection of its own and
// reads the answer within 5 s, as AgentENV's client does (best effort: the
// daemon may close the connection first, and its answer changes nothing).
func requestShutdown(path string) error {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := frame.Write(c, map[string]string{"kind": "shutdown"}); err != nil {
		return err
	}
	var resp map[string]any
	if err := frame.Read(c, &resp); err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	return nil
}
