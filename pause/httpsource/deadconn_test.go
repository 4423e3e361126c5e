package httpsource

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: over HTTP/2 (an https server that offers it, which Go's transport
// then uses for every request) the Source's own client sent every request
// on one connection and never checked that the connection still carried
// anything. A connection that went dead silently (a NAT or load balancer
// that dropped its state, a path cut with no FIN or RST) took every pause
// sent on it, and each waited to its context's end: the Preserver's bound,
// the phase deadline. A cancelled request does not retire the connection
// (Go's transport counts a reset against it only up to the server's stream
// limit, 250 for Go's server), so the retries went there too.
//
// Over a real TLS and HTTP/2 server, in memory so that the wait runs in
// virtual time: a pause opens the pauses' connection (the listings have
// one of their own, row 2621), then the path dies.
func TestPauseOnADeadHTTP2ConnectionFailsAndTheRetryGetsANewOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(2)
		n := newWire(t, f.handler())
		src := n.source(t, Config{})
		ids, err := src.RunningIDs(t.Context())
		require.NoError(t, err)
		require.Equal(t, []string{sandboxID(0), sandboxID(1)}, ids)
		require.NoError(t, src.Sandbox(sandboxID(1)).Preserve(ctxWithDeadline(t, time.Minute)))
		require.Equal(t, "HTTP/2.0", n.proto(), "the server offers HTTP/2 and the Source's client takes it")
		dials := n.dials()

		n.cut() // nothing more arrives either way; nothing says so
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		err = src.Sandbox(sandboxID(0)).Preserve(ctx)
		require.Error(t, err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the dead connection is found, not waited on to the pause's end")
		assert.LessOrEqual(t, time.Since(start), h2PingAfter+h2PingTimeout)
		assert.Equal(t, []string{sandboxID(1)}, f.paused(), "the pause never reached the server")

		retry, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		require.NoError(t, src.Sandbox(sandboxID(0)).Preserve(retry), "the retry goes on a new connection")
		assert.ElementsMatch(t, []string{sandboxID(0), sandboxID(1)}, f.paused())
		assert.Equal(t, dials+1, n.dials())
	})
}

// The same through the Preserver, as the supervisor runs it: the
// connections die right after the listing, the pauses' open (a pause of a
// sandbox the server does not have opened it). Before, every pause waited
// on it to the phase deadline: 0 of 8 preserved, 4 timed out, 4 not
// started.
func TestPreserverOverADeadHTTP2ConnectionPreservesEverySandbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const sandboxes = 8
		f := newFakeServer(sandboxes)
		n := newWire(t, f.handler())
		src := n.source(t, Config{})
		first := true
		list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			sbs, err := src.List(ctx)
			if first {
				_ = src.Sandbox("not-on-the-server").Preserve(ctx) // the pauses' connection, open
				n.cut()
				first = false
			}
			return sbs, err
		})
		p, err := pause.New(list, pause.Config{Limit: 4})
		require.NoError(t, err)
		start := time.Now()
		rep := p.Run(ctxWithDeadline(t, time.Minute), time.Now().Add(30*time.Second))
		assert.Equal(t, sandboxes, rep.Counts[pause.Preserved], "%v", rep.Counts)
		assert.Zero(t, rep.Lost())
		assert.Len(t, f.paused(), sandboxes)
		assert.Less(t, time.Since(start), 10*time.Second)
	})
}

// The health check does not take a slow pause for a dead connection: the
// server's HTTP/2 layer answers the PINGs while its handler works, and a
// pause of 20 s is answered on the connection it was sent on.
func TestSlowPauseOnALiveHTTP2ConnectionIsWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeServer(1, func(f *fakeServer) { f.pauseDelay = 20 * time.Second })
		n := newWire(t, f.handler())
		src := n.source(t, Config{})
		start := time.Now()
		require.NoError(t, src.Sandbox(sandboxID(0)).Preserve(ctxWithDeadline(t, time.Minute)))
		assert.Equal(t, 20*time.Second, time.Since(start))
		assert.Equal(t, 1, n.dials())
		assert.Equal(t, "HTTP/2.0", n.proto())
	})
}

// wire is a network in memory between a Source's own client and a real
// http.Server that serves TLS with HTTP/2, as Go's ServeTLS does by
// default, in a synctest bubble. A cut makes every connection open then
// silently dead: what either end writes is taken and never delivered, and
// no end learns of it, as on a path whose middlebox dropped its state.
type wire struct {
	srv  *http.Server
	pool *x509.CertPool
	ln   *pipenet.Listener

	mu     sync.Mutex
	links  []*link
	ndials int
	lastP  string // the protocol of the last request the server had
}

// link is one connection's path: the client's pipe and the server's, and
// whether the path is cut.
type link struct {
	mu   sync.Mutex
	dead bool
	ends []net.Conn // the relay's two ends
}

func (l *link) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// relay copies src to dst until either fails; on a dead link it reads
// and drops.
func (l *link) relay(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.isDead() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func newWire(t *testing.T, h http.Handler) *wire {
	cert, pool := selfSigned(t, "sandbox-server.test")
	w := &wire{pool: pool, ln: pipenet.Listen("sandbox-server.test:443")}
	w.srv = &http.Server{
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			w.mu.Lock()
			w.lastP = r.Proto
			w.mu.Unlock()
			h.ServeHTTP(rw, r)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = w.srv.ServeTLS(w.ln, "", "")
	}()
	t.Cleanup(func() {
		_ = w.srv.Close()
		w.mu.Lock()
		for _, l := range w.links {
			for _, c := range l.ends {
				_ = c.Close()
			}
		}
		w.mu.Unlock()
		<-served
	})
	return w
}

// source returns a Source of c with its own client, which reaches the
// server over w and trusts its certificate.
func (w *wire) source(t *testing.T, c Config) *Source {
	s, err := New("https://sandbox-server.test", c)
	require.NoError(t, err)
	for _, c := range []*http.Client{s.cfg.client, s.cfg.pauseClient} { // the listings' and the pauses'
		tr := c.Transport.(*http.Transport)
		tr.DialContext = w.dial
		tr.TLSClientConfig = &tls.Config{RootCAs: w.pool}
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func (w *wire) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, relayC := net.Pipe()
	relayS, server := net.Pipe()
	l := &link{ends: []net.Conn{relayC, relayS}}
	if err := w.ln.Hand(ctx, server); err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.links = append(w.links, l)
	w.ndials++
	w.mu.Unlock()
	go l.relay(relayS, relayC)
	go l.relay(relayC, relayS)
	return client, nil
}

// cut kills every connection open now; later ones work.
func (w *wire) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.links {
		l.mu.Lock()
		l.dead = true
		l.mu.Unlock()
	}
}

func (w *wire) dials() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ndials
}

func (w *wire) proto() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastP
}

// selfSigned returns a certificate for host, valid across synctest's
// clock (it starts in 2000), and a pool that trusts it.
func selfSigned(t *testing.T, host string) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
