package listening_test

import (
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/listening"
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
