package drain

import (
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A client that connected and has sent nothing yet (a load balancer's TCP
// check, a browser's or a proxy's preconnect, a TLS client stalled in its
// handshake) is in no request: net/http's Shutdown waits for such a
// connection until it is 5 s old, so the HTTP step closes it its reserve
// after the drain's work, as it closes a stream the gate does not count.
// Closing it cuts nothing, and the step is ok, saying what it closed.
// Fault (row 1840): the step failed with a bare "context canceled", the
// Report's error, and Run returned 1 for a drain that lost nothing. On
// loopback, the one-call path:
//
//	a client connects and sends nothing
//	SIGTERM: the two sandboxes preserved, the http step's Shutdown waits for that connection
//	its reserve (250 ms) later: closed; the step ok; Run returns 0
func TestHTTPStepIsNotFailedByAConnectionThatSentNoRequest(t *testing.T) {
	t.Setenv(EnvGrace, "10")
	t.Setenv(EnvHookListen, "127.0.0.1:0")
	t.Setenv(EnvHookSecret, "")
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	accepted := make(chan struct{}, 1)
	srv := &http.Server{Addr: "127.0.0.1:0", Handler: http.NewServeMux(), ReadHeaderTimeout: time.Minute,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				accepted <- struct{}{}
			}
		}}
	s, err := NewServer(srv, pause.Lister(node))
	require.NoError(t, err)
	sigs, code, addrs := serveLoopback(s)

	silent, err := net.Dial("tcp", addrs[0].String())
	require.NoError(t, err)
	defer silent.Close()
	<-accepted // the server holds it, in no request

	sigs <- syscall.SIGTERM
	assert.Equal(t, 0, <-code, "nothing was lost, no request was cut")
	rep := s.Drainer().Shutdown(t.Context()) // single-flight: Run's Report
	require.NoError(t, rep.Err())
	assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
	p := rep.Phase("http")
	require.NotNil(t, p)
	assert.Equal(t, OK, p.Result, p.Error)
	assert.Equal(t, "closed 1 connection(s) that had sent no request (a TCP check, a preconnect, a TLS handshake left unfinished): no request was cut", p.Detail)
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = silent.Read(make([]byte, 1))
	assert.Error(t, err, "the step closed it")
}
