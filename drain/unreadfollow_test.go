package drain

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A log follow, admitted as a drain.Stream as the docs say, whose client
// stopped reading (a terminal suspended with Ctrl-Z, a stalled proxy): its
// handler is in a Write that waits for the client, and a Write does not
// watch the request's context, which the gate cancels when the preserve
// phase ends. The gate now wakes a Write waiting then, as it wakes a Read
// (row 1012): the handler returns, the server's Shutdown waits for nothing,
// the step is ok. Fault (row 1841): the Write held the server's Shutdown
// until the step cut the connection its reserve after the drain's work,
// and the step failed, "1 connection(s) still in a request ... one that
// lasts as long as its client is admitted as a drain.Stream": exit 1 for a
// drain that lost nothing, blaming a wiring the server had. On loopback,
// the one-call path:
//
//	a follow's handler writes a 64 MiB backlog; its client reads none of it
//	SIGTERM: the two sandboxes preserved; the follow's Write fails; its handler returns
//	the http step ok; Run returns 0
func TestAFollowWhoseClientStoppedReadingEndsWithThePreservePhase(t *testing.T) {
	t.Setenv(EnvGrace, "10")
	t.Setenv(EnvHookListen, "127.0.0.1:0")
	t.Setenv(EnvHookSecret, "")
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	mux := http.NewServeMux()
	srv := &http.Server{Addr: "127.0.0.1:0", Handler: mux, ReadHeaderTimeout: time.Minute}
	s, err := NewServer(srv, pause.Lister(node))
	require.NoError(t, err)
	backlog := bytes.Repeat([]byte("a log line\n"), 64<<20/11) // far more than the sockets hold
	writing := make(chan struct{})
	returned := make(chan error, 1)
	mux.Handle("GET /sandboxes/{id}/logs", s.Drainer().Gate().Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(writing)
		_, err := w.Write(backlog)
		returned <- err
	})))
	sigs, code, addrs := serveLoopback(s)

	follow, err := net.Dial("tcp", addrs[0].String())
	require.NoError(t, err)
	defer follow.Close()
	_, err = io.WriteString(follow, "GET /sandboxes/sb-0/logs HTTP/1.1\r\nHost: sandboxd\r\n\r\n")
	require.NoError(t, err)
	<-writing // and the client reads nothing

	sigs <- syscall.SIGTERM
	assert.Equal(t, 0, <-code, "nothing was lost, no request the gate waits for was cut")
	rep := s.Drainer().Shutdown(t.Context()) // single-flight: Run's Report
	require.NoError(t, rep.Err())
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
	p := rep.Phase("http")
	require.NotNil(t, p)
	assert.Equal(t, OK, p.Result, p.Error)
	select {
	case err := <-returned:
		assert.ErrorIs(t, err, ErrDraining, "its Write failed as the stream ended")
	default:
		t.Error("the follow's handler was still in its Write when Run returned")
	}
}

// The ResponseWriter a Stream's handler gets (row 1841's, which wakes its
// Writes) keeps what a handler asserts of net/http's: Flusher, Hijacker,
// the deprecated CloseNotifier, and http.ResponseController's methods
// through Unwrap. On loopback, HTTP/1.1.
func TestAStreamsResponseWriterKeepsWhatHandlersAssert(t *testing.T) {
	g := &Gate{Exempt: []Class{Stream}}
	type asserted struct{ flusher, hijacker, closeNotifier, fullDuplex bool }
	got := make(chan asserted, 1)
	srv := httptest.NewServer(g.Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a asserted
		_, a.flusher = w.(http.Flusher)
		_, a.hijacker = w.(http.Hijacker)
		_, a.closeNotifier = w.(interface{ CloseNotify() <-chan bool })
		a.fullDuplex = http.NewResponseController(w).EnableFullDuplex() == nil
		got <- a
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, asserted{flusher: true, hijacker: true, closeNotifier: true, fullDuplex: true}, <-got)
}
