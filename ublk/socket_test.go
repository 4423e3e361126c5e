package ublk

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/frame"
	"github.com/drainkit/drainkit/internal/ublkhook"
)

// serveOnce answers one request on a Unix socket with resp and reports
// the request it got.
func serveOnce(t *testing.T, resp any) (string, <-chan map[string]string) {
	t.Helper()
	p := socketPath(t, "d.sock")
	ln, err := net.Listen("unix", p)
	require.NoError(t, err)
	got := make(chan map[string]string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req map[string]string
		if frame.Read(c, &req) == nil {
			got <- req
			_ = frame.Write(c, resp)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return p, got
}

func TestSocketRequestStopSpeaksAgentENVFraming(t *testing.T) {
	p, got := serveOnce(t, map[string]string{"status": "ok"})
	s := &Socket{Path: p}
	require.NoError(t, s.RequestStop(context.Background()))
	assert.Equal(t, map[string]string{"kind": "shutdown"}, <-got)
}

func TestSocketRefusalIsAnError(t *testing.T) {
	p, _ := serveOnce(t, map[string]string{"status": "error", "error": "busy"})
	s := &Socket{Path: p}
	err := s.RequestStop(context.Background())
	assert.ErrorContains(t, err, `status "error": busy`)
}

// AgentENV's daemon puts the reason of an answer that is not ok in
// "message" (DaemonResponse::Error, InvalidRequest and TerminalError in
// storage/ublk-daemon/src/protocol.rs): the refusal's error named only
// the status.
func TestSocketRefusalNamesAgentENVsMessage(t *testing.T) {
	p, _ := serveOnce(t, map[string]string{"status": "invalid_request", "message": "unknown device 7"})
	s := &Socket{Path: p}
	err := s.RequestStop(context.Background())
	assert.ErrorContains(t, err, `status "invalid_request": unknown device 7`)
}

func TestSocketRequestHonoursDeadline(t *testing.T) {
	p := socketPath(t, "d.sock")
	ln, err := net.Listen("unix", p)
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // hold it open, never answer
		}
	}()
	s := &Socket{Path: p}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = s.RequestStop(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	(<-accepted).Close()
}

func TestSocketToNothingFailsAndWaitSeesItGone(t *testing.T) {
	s := &Socket{Path: filepath.Join(t.TempDir(), "none.sock")}
	assert.Error(t, s.RequestStop(context.Background()))
	assert.NoError(t, s.Wait(context.Background()), "no listener: the daemon is gone")
	empty := &Socket{}
	assert.ErrorContains(t, empty.RequestStop(context.Background()), "Socket.Path is empty")
	assert.ErrorContains(t, empty.Wait(context.Background()), "Socket.Path is empty")
	assert.ErrorIs(t, empty.Kill(context.Background()), ErrCannotKill, "no Process to kill")
	_, err := New(empty, Config{hooks: ublkhook.Hooks{KernelRelease: vulnerable}})
	assert.ErrorContains(t, err, "ublk: New: the daemon's ublk: Socket.Path is empty")
}

func TestSocketClosedWithoutAnswerIsDelivered(t *testing.T) {
	p := socketPath(t, "d.sock")
	ln, err := net.Listen("unix", p)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			var req map[string]string
			_ = frame.Read(c, &req)
			c.Close() // acted on, never answered
		}
	}()
	s := &Socket{Path: p}
	assert.NoError(t, s.RequestStop(context.Background()))
}

// A device held by a stacked device, no last resort, and a daemon known by
// its socket alone that crashed before the step (its socket gone): the
// step ends with a HeldError without asking it to stop, and looks once at
// its exit with an ended context (row 44's rule). Before, Socket.Wait with
// an ended context returned its error without trying the socket, and the
// Report said the daemon was left running. Wait looks once whatever its
// context says, as Process.Wait does.
func TestSocketDaemonThatDiedDuringTheHolderWaitIsNotReportedRunning(t *testing.T) {
	s := &Socket{Path: filepath.Join(t.TempDir(), "gone.sock")}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.NoError(t, s.Wait(ctx), "no listener: the daemon is gone, seen with an ended context too")
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		f.hold(t, 0, "dm-3")
		td, err := New(s, f.config(vulnerable, nil, Config{HolderWait: time.Nanosecond, NoLastResort: true}))
		require.NoError(t, err)
		rep, _, err := runFor(t, td, 60*time.Second)
		var held *HeldError
		require.ErrorAs(t, err, &held)
		assert.False(t, rep.Daemon.Requested)
		assert.True(t, rep.Daemon.Exited, "the daemon is gone")
		assert.False(t, rep.Daemon.LeftRunning, "and was not left running")
	})
}

// A nil *Socket or *Process given as the daemon (a typed nil: the
// interface is not nil), or a Process not made by FindProcess, alone or
// paired with a Socket, is refused by New, naming it, as a Socket with no
// Path is: the step would otherwise learn it at SIGTERM. Before, New took
// them all: a nil *Socket's methods panicked in Stop, and the others'
// request, wait and kill failed at SIGTERM.
func TestNewRefusesADaemonThatIsNotOne(t *testing.T) {
	var nilSocket *Socket
	var nilProcess *Process
	cfg := Config{hooks: ublkhook.Hooks{KernelRelease: vulnerable}}
	for name, c := range map[string]struct {
		d    Daemon
		want string
	}{
		"nil Socket":               {nilSocket, "ublk: New: the daemon is a nil *ublk.Socket (pass nil for no daemon)"},
		"nil Process":              {nilProcess, "ublk: New: the daemon is a nil *ublk.Process (pass nil for no daemon)"},
		"zero Process":             {&Process{}, "ublk: New: the daemon's ublk: Process not made by ublk.FindProcess"},
		"Socket with zero Process": {&Socket{Path: "/run/d.sock", Process: &Process{}}, "ublk: New: the daemon's Socket.Process: ublk: Process not made by ublk.FindProcess"},
	} {
		td, err := New(c.d, cfg)
		assert.EqualError(t, err, c.want, name)
		assert.Nil(t, td, name)
	}
}

// socketPath returns a path for a Unix socket named name in a directory of
// its own, removed at the test's end. Not t.TempDir: its path holds the
// test's name, and a long name under a long TMPDIR passes sun_path's 107
// bytes (a clean clone's run with TMPDIR in its own directory: "bind:
// invalid argument").
func socketPath(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ublk")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}
