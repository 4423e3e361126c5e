package kube_test

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/drainkit/drainkit/kube"
)

// goAwayFirst is a listener whose first connection is an HTTP/2 API
// server instance going away: it reads the first request's HEADERS, sends
// a GOAWAY whose last stream is that request's (it was taken, so Go's
// transport may not send it again itself) and closes the connection
// without answering, as an instance shutting down past its in-flight
// requests, or one whose process ends, does. The connections after it are
// served as usual.
type goAwayFirst struct {
	net.Listener
	server *httptest.Server // its TLS config, set by StartTLS before the first Accept
	first  atomic.Bool
	gone   chan struct{}
}

func (l *goAwayFirst) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.first.Swap(true) {
		return c, err
	}
	go l.goAway(c)
	return l.Listener.Accept()
}

func (l *goAwayFirst) goAway(c net.Conn) {
	defer close(l.gone)
	tc := tls.Server(c, l.server.TLS)
	defer tc.Close()
	if _, err := io.ReadFull(tc, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(tc, tc)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			_ = fr.WriteGoAway(f.StreamID, http2.ErrCodeNo, nil)
			return
		}
	}
}

// Fault (docs/faults.md row 2840): with a Config.Client speaking HTTP/2, a
// read whose connection closed after the API server's GOAWAY named it
// among the streams it took, unanswered, failed ("http2: server sent
// GOAWAY and closed the connection"), where row 2742 sends a GET cut so on
// HTTP/1 again at once. It is sent again at once too.
func TestReadLostWithAGoAwayOnHTTP2IsSentAgainAtOnce(t *testing.T) {
	var gets atomic.Int32
	pod := podJSON(t, deleted(time.Now().Add(30*time.Second), 30))
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		assert.Equal(t, 2, r.ProtoMajor, "the read is sent on HTTP/2")
		pod(w, r)
	}))
	l := &goAwayFirst{Listener: s.Listener, server: s, gone: make(chan struct{})}
	s.Listener = l
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)

	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
	cfg := kube.Config{Host: s.URL, Namespace: testNamespace, TokenFile: token, Client: s.Client()}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	d, err := newPod(t, cfg, testPod).Deletion(ctx)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, d.Grace)
	<-l.gone
	assert.Equal(t, int32(1), gets.Load(), "the second connection answered the read sent again")
}

// A read that Config.Client's own timeout ended, the request sent whole and
// no answer come, is not taken for an answer lost with its connection: the
// API server may only be slow, and the client's bound would be waited out
// again. It fails after one request.
func TestReadTheClientTimedOutIsNotSentAgain(t *testing.T) {
	held := make(chan struct{})
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-held // answers nothing while the test runs, not even once the client gave up
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(held) })
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 50 * time.Millisecond // from the request written whole
	t.Cleanup(tr.CloseIdleConnections)
	var sent atomic.Int32
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return tr.RoundTrip(r)
	})}
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
	cfg := kube.Config{Host: s.URL, Namespace: testNamespace, TokenFile: token, Client: client}
	_, err := newPod(t, cfg, testPod).Deletion(t.Context())
	var timeout net.Error
	require.ErrorAs(t, err, &timeout)
	assert.True(t, timeout.Timeout(), "%v", err)
	assert.Equal(t, int32(1), sent.Load(), "sent once")
}

// silentFirst is a listener whose first connection goes silent when its
// silence is set: what the server writes on it from then on is dropped, as
// on a connection to an instance whose node was lost.
type silentFirst struct {
	net.Listener
	silence atomic.Bool
	first   atomic.Bool
}

func (l *silentFirst) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.first.Swap(true) {
		return c, err
	}
	return &silentConn{Conn: c, silence: &l.silence}, nil
}

type silentConn struct {
	net.Conn
	silence *atomic.Bool
}

func (c *silentConn) Write(b []byte) (int, error) {
	if c.silence.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// Fault (docs/faults.md row 3060): with a Config.Client speaking HTTP/2
// with health checks (client-go's transports ping after 30 s without a
// frame), a read taken on a connection that went silent failed when the
// transport gave the connection up ("http2: client connection lost"). It is
// sent again at once, on the next connection.
func TestReadOnAConnectionGoneSilentIsSentAgainAtOnce(t *testing.T) {
	var gets atomic.Int32
	pod := podJSON(t, deleted(time.Now().Add(30*time.Second), 30))
	var l *silentFirst
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			l.silence.Store(true) // the first read taken, its connection silent
			<-r.Context().Done()
			return
		}
		pod(w, r)
	}))
	l = &silentFirst{Listener: s.Listener}
	s.Listener = l
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: 100 * time.Millisecond, PingTimeout: 100 * time.Millisecond}
	t.Cleanup(tr.CloseIdleConnections)

	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
	cfg := kube.Config{Host: s.URL, Namespace: testNamespace, TokenFile: token, Client: &http.Client{Transport: tr}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a hang guard
	defer cancel()
	d, err := newPod(t, cfg, testPod).Deletion(ctx)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, d.Grace)
	assert.Equal(t, int32(2), gets.Load(), "the read lost with the silent connection and the one sent again")
}

// Fault: a read the API server refused with a TLS alert after the request
// was written (TLS 1.3: the client's handshake ends before the server has
// verified its certificate, so the client writes its request, then reads
// the server's alert: a client certificate refused, expired, of an unknown
// CA) was taken for an answer lost, its request written whole and no byte
// of an answer come, and sent again at once, 4 times, each a handshake of
// its own that the server refused the same. The alert is the server's
// answer: it fails after one.
func TestReadRefusedByATLSAlertIsNotSentAgain(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				t.Error("a request reached the handler past the refused certificate")
			}))
			s.EnableHTTP2 = h2
			s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
			var handshakes atomic.Int32
			s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					handshakes.Add(1)
				}
			}
			s.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses
			s.StartTLS()
			t.Cleanup(s.Close)
			tr := s.Client().Transport.(*http.Transport).Clone() // no client certificate
			t.Cleanup(tr.CloseIdleConnections)

			token := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
			cfg := kube.Config{Host: s.URL, Namespace: testNamespace, TokenFile: token, Client: &http.Client{Transport: tr}}
			_, err := newPod(t, cfg, testPod).Deletion(t.Context())
			// The alert's error; on HTTP/2 sometimes the connection's, closed
			// by the alert before the request's stream began. Each
			// connection's StateNew came before its handshake, so before Deletion returned.
			require.Error(t, err)
			assert.Equal(t, int32(1), handshakes.Load(), "one connection, refused")
		})
	}
}

// Fault: a read that Config.Client's transport sent again itself (Go's
// sends a GET again on a new connection when the kept-alive one it was
// written on closed unanswered) and whose new connection was refused (no
// API server there now) was taken for an answer lost: the trace's first
// write was the request's for the whole of Do. The refused connection,
// nothing written on it, fails the read after one request.
func TestReadWhoseTransportsOwnResendWasRefusedIsNotSentAgain(t *testing.T) {
	pod := podJSON(t, deleted(time.Now().Add(30*time.Second), 30))
	var gets atomic.Int32
	var s *httptest.Server
	s = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			pod(w, r) // kept alive
			return
		}
		s.Listener.Close() // the API server gone: a new connection is refused
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close() // the read taken, unanswered
		}
	}))
	t.Cleanup(s.Close)
	tr := s.Client().Transport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	var sent atomic.Int32
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent.Add(1)
		return tr.RoundTrip(r)
	})}
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("token-1"), 0o600))
	cfg := kube.Config{Host: s.URL, Namespace: testNamespace, TokenFile: token, Client: client}
	p := newPod(t, cfg, testPod)
	_, err := p.Deletion(t.Context())
	require.NoError(t, err)

	_, err = p.Deletion(t.Context())
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	assert.Equal(t, int32(2), gets.Load(), "the first read, and the second on the kept-alive connection")
	assert.Equal(t, int32(2), sent.Load(), "one request a read")
}
