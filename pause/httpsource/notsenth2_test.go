package httpsource

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Fault: row 2481 took a failed pause for one never sent when it got no
// connection (httptrace's GotConn), but over HTTP/2 a pause gets the
// pooled connection first and then waits for a stream: a server that
// lets one stream at a time (its MAX_CONCURRENT_STREAMS) and a client
// that keeps to it (HTTP2Config.StrictMaxConcurrentRequests: no second
// connection) hold the pause before any of it is written, and one whose
// context ended there was still taken for a pause that got no answer, a
// gone answer to its next pause counting the sandbox lost. The Source now
// asks whether any request's headers were written (httptrace's
// WroteHeaders, which net/http calls on its HTTP/1 and HTTP/2 paths once
// the whole header block is written, and not at all when none of it is).
// In virtual time, over real TLS and HTTP/2 in memory:
//
//	0 s    pause a: the connection's one stream, a pause of 10 s
//	0 s    pause b: the connection, then a wait for a stream; its
//	       context ends at 1 s: before, "no answer"; now "not sent"
//	1 s    b's user deletes it
//	10 s   a answered; b's pause again: 404
//	       before: lost; now gone (pause.ErrGone)
func TestAPauseWaitingForAnHTTP2StreamIsNotOneTheServerMayGoOnWith(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(2, func(f *fakeServer) { f.pauseDelay = 10 * time.Second })
		cert, pool := selfSigned(t, "sandbox-server.test")
		srv := &http.Server{Handler: f.handler(), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
			HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1}}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
			HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true}}
		src := sourceInMemory(t, srv, tr, Config{})
		a, b := src.Sandbox(sandboxID(0)), src.Sandbox(sandboxID(1))

		answered := make(chan error, 1)
		go func() { answered <- a.Preserve(ctxWithDeadline(t, time.Minute)) }()
		synctest.Wait() // a's pause on the connection's one stream, the server pausing it
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
