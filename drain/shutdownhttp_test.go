package drain

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ShutdownHTTP's doc said that the srv.Close it calls once ctx ends closes
// every remaining connection, "including hijacked ones Shutdown leaves
// alone". net/http's Close knows nothing of a hijacked connection either
// (a WebSocket, an attach's raw stream): one outlives ShutdownHTTP, and
// the server's step, until its handler ends it, as net/http's docs say.
// A real server, a real attach:
//
//	attach hijacked; a request that never ends holds Shutdown
//	ShutdownHTTP(50 ms): Close at its end, the hanging request cut
//	the attach still echoes: its handler must end it (RegisterOnShutdown, a Stream's context)
func TestShutdownHTTPLeavesAHijackedConnectionToItsHandler(t *testing.T) {
	entered := make(chan struct{})
	attached := make(chan struct{}) // closed when the attach's handler returned
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/attach" {
			close(entered)
			<-r.Context().Done() // a request that never finishes on its own
			return
		}
		defer close(attached)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: raw\r\n\r\n")
		if rw.Flush() == nil {
			_, _ = io.Copy(conn, rw) // echoes until its client closes
		}
	}))
	srv.Start()
	defer srv.Close()

	attach, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer attach.Close()
	require.NoError(t, attach.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(attach, "GET /attach HTTP/1.1\r\nHost: sandbox\r\n\r\n")
	require.NoError(t, err)
	in := bufio.NewReader(attach)
	status, err := in.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(status, "HTTP/1.1 101"), status)
	for line := ""; line != "\r\n"; {
		line, err = in.ReadString('\n')
		require.NoError(t, err)
	}

	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ShutdownHTTP(ctx, srv.Config), context.DeadlineExceeded, "the hanging request held Shutdown to ctx's end")
	require.Error(t, <-errc, "Close cut the hanging request's connection")

	_, err = io.WriteString(attach, "ping\n")
	require.NoError(t, err)
	echo, err := in.ReadString('\n')
	require.NoError(t, err, "the hijacked connection is still open: Close does not know it")
	assert.Equal(t, "ping\n", echo)
	require.NoError(t, attach.Close()) // the client leaves: the handler's echo ends
	<-attached
}
