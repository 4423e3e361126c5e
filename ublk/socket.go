package ublk

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/frame"
)

// Socket is a daemon stopped by a request on its Unix socket at Path, in
// the form AgentENV's uvm-ublk-daemon uses: one request per connection, a
// 4-byte big-endian length then JSON, {"kind":"shutdown"}. That daemon
// answers {"status":"ok"} at once and stops its devices afterwards
// (storage/ublk-daemon/src/server.rs), so the answer says the stop was
// delivered, never that the devices are gone: the step waits for those and
// for the exit. An answer {"status":"ok"}, and no answer followed by the
// daemon's exit, both count as a stop delivered; a request sent and still
// unanswered at the deadline is ErrUnconfirmed, which the step takes as
// delivered (that daemon, once stopping, reads no request: its server
// asks it first); any other status is a refusal, its reason read from
// "message" (AgentENV's) or "error". Pair it with the daemon's Process so
// that RequestStop and Wait see the exit through a pidfd and Kill can
// escalate; without one, Wait treats the socket refusing connections as
// the exit, and Kill returns ErrCannotKill. New rejects a Socket without
// a Path; RequestStop and Wait of one (the zero Socket) return an error
// saying Socket.Path is empty, and its Kill, with no Process, returns
// ErrCannotKill.
type Socket struct {
	// Path is the daemon's socket.
	Path string
	// Process is the daemon's process, or nil.
	Process *Process
}

// socketPoll is how often Socket.Wait tries the socket without a Process.
const socketPoll = 100 * time.Millisecond

// errNoPath is the error of a Socket without a Path.
var errNoPath = errors.New("ublk: Socket.Path is empty")

// RequestStop sends {"kind":"shutdown"} and returns nil once the daemon
// answered {"status":"ok"}, or closed the connection without an answer and
// then exited (seen through the paired Process; without one, the close
// alone counts), or had exited before the request. A request sent but
// neither answered nor followed by the exit by ctx's end is ErrUnconfirmed
// (a daemon already stopping reads none). Any other answer, or a refused
// connection of a daemon still running, is an error.
func (s *Socket) RequestStop(ctx context.Context) error {
	if s.Process != nil && s.Process.Exited() {
		return nil // nothing left to ask
	}
	rctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	if s.Process != nil {
		go func() {
			defer close(watched)
			if s.Process.Wait(rctx) == nil {
				cancel(errDaemonExited)
			}
		}()
	} else {
		close(watched)
	}
	defer func() { cancel(nil); <-watched }()

	var resp struct {
		Status  string `json:"status"`
		Message string `json:"message"` // AgentENV's daemon's reason
		Error   string `json:"error"`   // other daemons'
	}
	err := s.Request(rctx, map[string]string{"kind": "shutdown"}, &resp)
	switch {
	case err == nil && resp.Status != "ok":
		err := fmt.Errorf("ublk: daemon refused shutdown: status %q", resp.Status)
		if why := cmp.Or(resp.Message, resp.Error); why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return err
	case err == nil:
		return nil
	case errors.Is(context.Cause(rctx), errDaemonExited):
		return nil // no answer, then the exit
	case errors.Is(err, errNotYetAnswered):
		// Sent, and not read by ctx's end: a daemon already stopping
		// (AgentENV's, asked by its server) reads no request.
		return fmt.Errorf("%w: %w", ErrUnconfirmed, err)
	case !errors.Is(err, errUnanswered):
		return err
	case s.Process == nil:
		return nil // closed without an answer: taken as delivered; Wait tells
	}
	// Closed without an answer: delivered if the daemon now exits.
	if werr := s.Process.Wait(ctx); werr != nil {
		return fmt.Errorf("%w, and the daemon did not exit: %w", err, werr)
	}
	return nil
}

// errDaemonExited is the cause RequestStop cancels its request with when
// the paired Process exits first.
var errDaemonExited = errors.New("ublk: daemon exited")

// errUnanswered is wrapped by Request when the daemon closed the
// connection after the request was sent, without an answer.
var errUnanswered = errors.New("connection closed without an answer")

// Request sends req as one length-prefixed JSON frame on a new connection
// and decodes the one-frame answer into resp. It returns by ctx's
// deadline.
func (s *Socket) Request(ctx context.Context, req, resp any) error {
	var d net.Dialer
	if s.Path == "" {
		return errNoPath
	}
	c, err := d.DialContext(ctx, "unix", s.Path)
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
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
			err = fmt.Errorf("%w: %w", errUnanswered, err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("%w: %w", errNotYetAnswered, err)
		}
		return s.ctxErr(ctx, fmt.Errorf("ublk: daemon socket: no answer: %w", err))
	}
	return nil
}

// errNotYetAnswered is wrapped by Request when the request was sent and
// ctx ended (its deadline, or its cancellation) before any answer came,
// the connection still open.
var errNotYetAnswered = errors.New("sent, no answer yet")

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
// socket refuses connections or is gone (the daemon closed its listener),
// polling every 100 ms; any other failure to connect (a full accept queue:
// EAGAIN) is a daemon still running. It returns ctx.Err() when ctx ends
// first; given a ctx already ended, it looks once, as a Process does (the
// step's look at a daemon it never asked to stop).
func (s *Socket) Wait(ctx context.Context) error {
	if s.Process != nil {
		return s.Process.Wait(ctx)
	}
	t := time.NewTicker(socketPoll)
	defer t.Stop()
	for {
		var d net.Dialer
		if s.Path == "" {
			return errNoPath
		}
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if ctx.Err() != nil { // look once all the same: a dial with ctx ended would not try
			dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), readSlack)
		}
		c, err := d.DialContext(dctx, "unix", s.Path)
		cancel()
		if err == nil {
			c.Close()
		} else if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, fs.ErrNotExist) {
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
	if s.Process == nil {
		return ErrCannotKill
	}
	return s.Process.Kill(ctx)
}
