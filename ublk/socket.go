package ublk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/drainkit/drainkit/internal/frame"
)

// Socket is a daemon stopped by a request on its Unix socket, in the form
// AgentENV's uvm-ublk-daemon uses: one request per connection, a 4-byte
// big-endian length then JSON; {"kind":"shutdown"} is answered
// {"status":"ok"}. Pair it with the daemon's Process so that Wait sees the
// exit through a pidfd and Kill can escalate; without one, Wait treats the
// socket refusing connections as the exit, and Kill returns ErrCannotKill.
type Socket struct {
	path string
	proc *Process
}

// socketPoll is how often Socket.Wait tries the socket without a Process.
const socketPoll = 100 * time.Millisecond

// NewSocket returns a Socket daemon for the socket at path. proc may be
// nil.
func NewSocket(path string, proc *Process) (*Socket, error) {
	if path == "" {
		return nil, errors.New("ublk: NewSocket: path is empty")
	}
	return &Socket{path: path, proc: proc}, nil
}

// Path returns the socket path.
func (s *Socket) Path() string { return s.path }

// RequestStop sends {"kind":"shutdown"} and returns nil once the daemon
// answered {"status":"ok"}. Any other answer, a refused connection or no
// answer by ctx's deadline is an error.
func (s *Socket) RequestStop(ctx context.Context) error {
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	if err := s.Request(ctx, map[string]string{"kind": "shutdown"}, &resp); err != nil {
		return err
	}
	if resp.Status != "ok" {
		return fmt.Errorf("ublk: daemon refused shutdown: status %q %s", resp.Status, resp.Error)
	}
	return nil
}

// Request sends req as one length-prefixed JSON frame on a new connection
// and decodes the one-frame answer into resp. It returns by ctx's
// deadline.
func (s *Socket) Request(ctx context.Context, req, resp any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", s.path)
	if err != nil {
		return fmt.Errorf("ublk: daemon socket: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := frame.Write(c, req); err != nil {
		return s.ctxErr(ctx, fmt.Errorf("ublk: daemon socket: send: %w", err))
	}
	if err := frame.Read(c, resp); err != nil {
		return s.ctxErr(ctx, fmt.Errorf("ublk: daemon socket: no answer: %w", err))
	}
	return nil
}

// ctxErr adds ctx's error to an I/O error caused by ctx ending. The
// connection's own deadline (ctx's) may fire just before ctx reports it.
func (s *Socket) ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
	}
	return err
}

// Wait waits for the paired Process to exit; without one, until the
// socket refuses connections (the daemon closed its listener), polling
// every 100 ms. It returns ctx.Err() when ctx ends first.
func (s *Socket) Wait(ctx context.Context) error {
	if s.proc != nil {
		return s.proc.Wait(ctx)
	}
	t := time.NewTicker(socketPoll)
	defer t.Stop()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", s.path)
		if err == nil {
			c.Close()
		} else if ctx.Err() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Kill kills the paired Process, or returns ErrCannotKill without one.
func (s *Socket) Kill(ctx context.Context) error {
	if s.proc == nil {
		return ErrCannotKill
	}
	return s.proc.Kill(ctx)
}
