package httpsource

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/wrappedtransport"
)

// Fault: New without a Client cloned http.DefaultTransport with an
// unchecked type assertion to *http.Transport, and a program that had put
// a wrapper there (otelhttp.NewTransport(http.DefaultTransport), a
// recording or mocking RoundTripper) panicked in New: "interface
// conversion: http.RoundTripper is *wrappedtransport.Counting, not
// *http.Transport", at its start, or at SIGTERM in a server that makes its
// Source then.
//
//	program    http.DefaultTransport = a wrapper of it
//	New        before: panic; now the Source's own client, with net/http's
//	           default transport settings, which the wrapper does not see
//	list, pause a, b, c on a server closing kept-alive connections as the
//	           next request arrives: each pause sent once, and read
//
// The Source's own client stays its own, for what it guarantees (no pause
// on a kept-alive connection, the HTTP/2 health check, a failed pause
// known not sent when it got no connection) holds of net/http's transport
// alone; a program whose requests must go through its wrapper gives the
// Source a Client with it (Config.Client).
func TestNewWithoutAClientWhenTheProgramWrappedTheDefaultTransport(t *testing.T) {
	wrapper := wrappedtransport.Install(t)

	f := newFakeServer(3)
	url, ln := f.startClosingKeptAlive(t)
	var src *Source
	require.NotPanics(t, func() {
		var err error
		src, err = New(url, Config{})
		require.NoError(t, err)
	})
	preserveEachListedOnce(t, f, src)
	assert.Zero(t, ln.Dropped(), "no pause went on a kept-alive connection")
	assert.Zero(t, wrapper.Requests(), "the Source's own client, not the program's wrapper")
}
