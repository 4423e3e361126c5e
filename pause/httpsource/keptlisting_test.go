package httpsource

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/keepaliveclose"
)

// Fault: since row 2480 the Source's own client dialed a connection for
// every request, the listing's pages too, where only a pause needs one of
// its own (a POST that net/http does not send again once written). A
// listing is a GET, which net/http sends again itself when a kept-alive
// connection closes under it, and it is made again and again through a
// drain: each listing pass of the Preserver, the listing that settles a
// gone answer, each poll after a 202 Accepted, the preStop wait's. A
// listing of 10,000 sandboxes at 100 a page made 100 connections (a TLS
// handshake each over HTTPS without HTTP/2: 628 ms against 48 ms on a kept
// connection, on loopback), and left 100 ports in TIME_WAIT for 60 s.
//
//	list       3 pages: before, 3 connections; now 1, kept
//	list       again: before, 3 more; now on the kept one
//	pause x6   each on a connection of its own (row 2480)
func TestListingPagesShareAKeptConnectionAndPausesDialTheirOwn(t *testing.T) {
	srv, conns := startPagedServer(t, 6, 2, nil)
	src, err := New(srv.URL, pagedConfig())
	require.NoError(t, err)

	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.Len(t, sbs, 6)
	assert.EqualValues(t, 1, conns.Load(), "the three pages on one connection")
	_, err = src.List(t.Context())
	require.NoError(t, err)
	assert.EqualValues(t, 1, conns.Load(), "the next listing on the kept connection")

	for _, sb := range sbs {
		require.NoError(t, sb.Preserve(ctxWithDeadline(t, time.Minute)), "pause %s", sb.ID())
	}
	assert.EqualValues(t, 1+6, conns.Load(), "each pause on a connection of its own")
}

// A listing is safe on a kept connection: when the server's keep-alive
// timeout closes it as a page's request arrives, net/http sends the GET
// again on a new connection, and the listing is whole.
//
//	page 1     a new connection, kept
//	page 2     on it: closed unread; sent again on a new one, kept
//	page 3     on that: closed unread; sent again
func TestListingOnAKeptConnectionTheServerClosesIsSentAgain(t *testing.T) {
	var ln *keepaliveclose.Listener
	srv, _ := startPagedServer(t, 6, 2, func(l net.Listener) net.Listener {
		ln = keepaliveclose.Wrap(l)
		return ln
	})
	src, err := New(srv.URL, pagedConfig())
	require.NoError(t, err)

	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	assert.Len(t, sbs, 6, "every page listed")
	assert.Positive(t, ln.Dropped(), "pages reached kept connections as the server closed them")
}

// pagedConfig is the Config of startPagedServer's API.
func pagedConfig() Config {
	return Config{PageTokenHeader: "x-next-token", PageTokenParam: "nextToken"}
}

// startPagedServer serves n running sandboxes, perPage a page (the next
// page's token in x-next-token), and answers their pauses 204, on a
// loopback listener (wrapped by wrap, if not nil) until the test ends. It
// counts the connections it accepts.
func startPagedServer(t *testing.T, n, perPage int, wrap func(net.Listener) net.Listener) (*httptest.Server, *atomic.Int64) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		from, _ := strconv.Atoi(r.URL.Query().Get("nextToken"))
		to := min(from+perPage, n)
		if to < n {
			w.Header().Set("x-next-token", strconv.Itoa(to))
		}
		items := make([]string, 0, to-from)
		for i := from; i < to; i++ {
			items = append(items, fmt.Sprintf(`{"id":%q,"state":"running"}`, sandboxID(i)))
		}
		_, _ = fmt.Fprintf(w, "[%s]", strings.Join(items, ","))
	})
	mux.HandleFunc("POST /sandboxes/{id}/pause", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewUnstartedServer(mux)
	conns := &atomic.Int64{}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if wrap != nil {
		srv.Listener = wrap(srv.Listener)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}
