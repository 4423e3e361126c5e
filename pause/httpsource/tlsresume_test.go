package httpsource

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: each pause dials a connection of its own (row 2480), and over
// HTTPS without HTTP/2 (a server or proxy that offers HTTP/1.1 alone) the
// Source's own client made a full TLS handshake for each, for it kept no
// TLS session to resume: a certificate sent, verified and signed for, and
// a key exchange, each time, on the node whose CPU the pauses need. On
// loopback, 3,000 pauses 32 at once cost 2.2 ms of CPU each (client and
// server), 6.6 ms of wall time a pause; resumed, 0.89 and 1.4 ms.
//
//	pause a    a full handshake: the server's ticket kept
//	pause b    a connection of its own, its session resumed
//	pause c    the same
func TestPausesOverHTTPSResumeTheTLSSession(t *testing.T) {
	var mu sync.Mutex
	var resumed []bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumed = append(resumed, r.TLS.DidResume)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.EnableHTTP2 = false
	srv.StartTLS()
	t.Cleanup(srv.Close)
	src, err := New(srv.URL, Config{})
	require.NoError(t, err)
	trust(src.cfg.pauseClient.Transport.(*http.Transport), srv.Certificate())
	t.Cleanup(src.CloseIdleConnections)

	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, src.Sandbox(id).Preserve(ctxWithDeadline(t, time.Minute)), "pause %s", id)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []bool{false, true, true}, resumed, "whether each pause's TLS session was resumed")
}

// trust makes tr trust cert, in the TLS config it has, if any.
func trust(tr *http.Transport, cert *x509.Certificate) {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = pool
}
