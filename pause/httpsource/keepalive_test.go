package httpsource

import (
	"maps"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/keepaliveclose"
)

// Fault: the Source's own client kept its HTTP/1 connections open for the
// next request (net/http's keep-alive), and a server closes a kept-alive
// connection when its keep-alive timeout fires (Go's IdleTimeout, hyper's,
// nginx's keepalive_timeout, a proxy's). A pause sent on one as the server
// closes it is written into a connection the server no longer reads: the
// client reads EOF (or a reset) with no answer, and net/http sends a POST
// again only when no byte of it was written, which a write into the socket
// buffer always is. The Source took it for a pause that got no answer,
// which the server may go on with, so a gone answer to its retry counted
// the sandbox lost. Against a real server with a 2 ms IdleTimeout, pauses
// sent 1.5 to 2.5 ms apart: 58 to 81 of 500 got no answer, none of them
// seen by the server.
//
// Here the server's keep-alive timeout fires as the next request arrives,
// every time: it closes the connection without reading the request.
//
//	list       a, b, c running (a new connection, kept open by the client)
//	pause a    before: on the kept connection, closed unread: no answer
//	pause b    before: on a new connection: 204
//	pause c    before: on b's kept connection, closed unread: no answer
//
// Now each pause goes on a connection of its own, which the server reads.
func TestPauseIsNotSentOnAConnectionTheServerClosesAsItArrives(t *testing.T) {
	f := newFakeServer(3)
	url, ln := f.startClosingKeptAlive(t)
	src, err := New(url, Config{})
	require.NoError(t, err)
	preserveEachListedOnce(t, f, src)
	assert.Zero(t, ln.Dropped(), "no request reached a connection as the server closed it")
}

// preserveEachListedOnce lists src's sandboxes, f's three, and preserves
// each: every pause succeeds, and f read each pause once.
func preserveEachListedOnce(t *testing.T, f *fakeServer, src *Source) {
	t.Helper()
	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.Len(t, sbs, 3)
	for _, sb := range sbs {
		assert.NoError(t, sb.Preserve(ctxWithDeadline(t, time.Minute)), "pause %s", sb.ID())
	}
	assert.Equal(t, map[string]int{sandboxID(0): 1, sandboxID(1): 1, sandboxID(2): 1}, f.pauseRequests(),
		"each pause sent once, and read")
}

// startClosingKeptAlive serves f on a loopback listener until the test
// ends, as a server whose keep-alive timeout fires as the next request
// arrives on a connection it has answered one on (keepaliveclose).
func (f *fakeServer) startClosingKeptAlive(t *testing.T) (string, *keepaliveclose.Listener) {
	srv := httptest.NewUnstartedServer(f.handler())
	ln := keepaliveclose.Wrap(srv.Listener)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, ln
}

// pauseRequests returns the pause requests f read, per sandbox.
func (f *fakeServer) pauseRequests() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.requests)
}
