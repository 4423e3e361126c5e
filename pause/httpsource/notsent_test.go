package httpsource

import (
	"context"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause that failed before its client got it a connection (one
// waiting for a connection under its Transport's MaxConnsPerHost, below
// the Preserver's limit, when its context ended; a dial refused, or cut)
// was taken for a pause that got no answer, which the server may go on
// with: the server never had it, yet a gone answer to the sandbox's next
// pause (its user deleted it meanwhile) counted the sandbox lost, "gone
// after a pause that got no answer", and the Report said the server never
// answered it. In virtual time, over a real HTTP/1.1 exchange in memory,
// a Client whose Transport keeps one connection to the server:
//
//	0 s    pause a: the connection, and a pause of 10 s on the server
//	0 s    pause b waits for a connection; its context ends at 1 s
//	       before: "no answer before its context ended"; now "not sent"
//	1 s    b's user deletes it
//	10 s   a answered; b's pause again: 404
//	       before: lost; now gone (pause.ErrGone)
func TestAPauseThatNeverGotAConnectionIsNotOneTheServerMayGoOnWith(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(2, func(f *fakeServer) { f.pauseDelay = 10 * time.Second })
		src := sourceInMemory(t, &http.Server{Handler: f.handler()}, &http.Transport{MaxConnsPerHost: 1}, Config{})
		a, b := src.Sandbox(sandboxID(0)), src.Sandbox(sandboxID(1))

		answered := make(chan error, 1)
		go func() { answered <- a.Preserve(ctxWithDeadline(t, time.Minute)) }()
		synctest.Wait() // a's pause is on the one connection, the server pausing it
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := b.Preserve(ctx)
		cancel()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not sent", "b's pause never left the client")
		assert.NotContains(t, err.Error(), "no answer")
		assert.Zero(t, f.pauseRequests()[sandboxID(1)], "the server never had b's pause")

		f.remove(sandboxID(1)) // its user deletes it
		require.NoError(t, <-answered)
		err = b.Preserve(ctxWithDeadline(t, time.Minute))
		assert.ErrorIs(t, err, pause.ErrGone, "deleted by its user: no pause of it was ever out")
	})
}

// sourceInMemory serves srv on a network in memory (pipenet), over TLS
// where srv has a TLSConfig, until the test ends, and returns a Source of
// it, as cfg says, whose Client's transport is tr dialing that network: a
// real HTTP exchange that a synctest bubble runs in virtual time.
func sourceInMemory(t *testing.T, srv *http.Server, tr *http.Transport, cfg Config) *Source {
	t.Helper()
	scheme, port, serve := "http", "80", srv.Serve
	if srv.TLSConfig != nil {
		scheme, port = "https", "443"
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	ln := pipenet.Listen("sandbox-server.test:" + port)
	go func() { _ = serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	tr.DialContext = ln.Dial
	t.Cleanup(tr.CloseIdleConnections)
	cfg.Client = &http.Client{Transport: tr}
	src, err := New(scheme+"://sandbox-server.test", cfg)
	require.NoError(t, err)
	return src
}
