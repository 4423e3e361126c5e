//go:build linux

package ublk

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// busyListener is a daemon's socket whose accept queue is full (backlog 0
// and one connection waiting): the daemon runs but does not accept, busy
// stopping its devices. A connect then fails with EAGAIN, not ECONNREFUSED.
func busyListener(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "d.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Bind(fd, &unix.SockaddrUnix{Name: p}))
	require.NoError(t, unix.Listen(fd, 0))
	waiting, err := net.Dial("unix", p)
	require.NoError(t, err)
	t.Cleanup(func() { waiting.Close() })
	_, err = net.Dial("unix", p)
	require.ErrorIs(t, err, unix.EAGAIN, "the accept queue is full")
	return p
}

// Only a socket that refuses connections, or is gone, says the daemon
// exited: one whose accept queue is full belongs to a daemon still running.
func TestSocketWaitDoesNotTakeABusyListenerForAnExit(t *testing.T) {
	s := &Socket{Path: busyListener(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 3*socketPoll)
	defer cancel()
	assert.ErrorIs(t, s.Wait(ctx), context.DeadlineExceeded, "the daemon is still running")
}
