package listening_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/listening"
	"github.com/drainkit/drainkit/internal/listening/listeningtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A listener is found on its address, and on the address of a connection
// it accepted (what a server's peer.LocalAddr says), until it closes; the
// connection still open then is no listener.
func TestOnFindsAListenerUntilItCloses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket tables are Linux's")
	}
	for name, listen := range map[string]func() (net.Listener, error){
		"tcp4":     func() (net.Listener, error) { return net.Listen("tcp4", "127.0.0.1:0") },
		"tcp6":     func() (net.Listener, error) { return net.Listen("tcp6", "[::1]:0") },
		"wildcard": func() (net.Listener, error) { return net.Listen("tcp", ":0") },
		"unix":     func() (net.Listener, error) { return net.Listen("unix", filepath.Join(t.TempDir(), "s.sock")) },
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := listen()
			if name == "tcp6" && err != nil {
				t.Skip("no IPv6 loopback here:", err)
			}
			require.NoError(t, err)
			target := ln.Addr().String()
			if name == "wildcard" {
				target = net.JoinHostPort("127.0.0.1", portOf(t, ln.Addr()))
			}
			client, err := net.Dial(ln.Addr().Network(), target)
			require.NoError(t, err)
			defer client.Close()
			server, err := ln.Accept()
			require.NoError(t, err)
			defer server.Close()

			on, known := listening.On(ln.Addr())
			assert.True(t, known)
			assert.True(t, on, "the listener on %v", ln.Addr())
			on, _ = listening.On(server.LocalAddr())
			assert.True(t, on, "a connection it accepted, on %v", server.LocalAddr())

			require.NoError(t, ln.Close())
			on, known = listening.On(server.LocalAddr())
			assert.True(t, known)
			assert.False(t, on, "closed: the open connection on %v is no listener", server.LocalAddr())
		})
	}
}

func portOf(t *testing.T, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	require.NoError(t, err)
	return port
}

// An address of no kind it can look up is unknown, not "not listening".
func TestOnDoesNotKnowOtherAddresses(t *testing.T) {
	on, known := listening.On(&net.IPAddr{IP: net.IPv4(127, 0, 0, 1)})
	assert.False(t, known)
	assert.False(t, on)
	on, known = listening.On(nil)
	assert.False(t, known)
	assert.False(t, on)
}

// Fault (row 2586): On read a socket's name in /proc/net/unix as the 8th
// space-separated field of its line, so a path with a space or a newline
// in it, or an abstract name with a NUL inside it (the table shows '@'
// for it), was not found while its socket listened. Each is found now,
// and not once closed.
func TestOnFindsAUnixListenerWhateverItsName(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket tables are Linux's")
	}
	for name, path := range listeningtest.UnixNamesShownOtherwise(t, "listening", "test") {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("unix", path)
			require.NoError(t, err)
			addr := &net.UnixAddr{Name: path, Net: "unix"}
			on, known := listening.On(addr)
			assert.True(t, known)
			assert.True(t, on, "listening on %q", path)
			require.NoError(t, ln.Close())
			on, known = listening.On(addr)
			assert.True(t, known)
			assert.False(t, on, "closed")
		})
	}
}

// Go's name of an abstract socket with a NUL inside (a connection's
// LocalAddr, from getsockname) ends at the NUL: a listener whose name goes
// on after it may be that socket or another, and On does not know.
func TestOnDoesNotKnowAnAbstractNameCutAtANUL(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket tables are Linux's")
	}
	ln, err := net.Listen("unix", fmt.Sprintf("@listening-cut-%d\x00test", os.Getpid()))
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("unix", fmt.Sprintf("@listening-cut-%d\x00test", os.Getpid()))
	require.NoError(t, err)
	defer client.Close()
	server, err := ln.Accept()
	require.NoError(t, err)
	defer server.Close()
	require.Equal(t, fmt.Sprintf("@listening-cut-%d", os.Getpid()), server.LocalAddr().String(), "Go's name ends at the NUL")

	on, known := listening.On(server.LocalAddr())
	assert.False(t, known)
	assert.False(t, on)
}

// Fault (row 2587): On took an IPv4 socket on 0.0.0.0:P for a listener of
// an IPv6 address on port P, which no IPv6 connection reaches: a held
// draingrpc.Stop took its own RPC on [::1]:P for another server's.
func TestOnDoesNotTakeAnIPv4WildcardForAnIPv6Listener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the socket tables are Linux's")
	}
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	on, known := listening.On(&net.TCPAddr{IP: net.IPv6loopback, Port: port})
	if !known {
		t.Skip("no IPv6 socket table here")
	}
	assert.False(t, on, "no IPv6 connection reaches 0.0.0.0:%d", port)
	on, _ = listening.On(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	assert.True(t, on, "an IPv4 one does")
}
