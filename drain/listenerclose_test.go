package drain

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deregisteringListener is a listener whose Close also takes the server
// out of a registry (a load balancer's, a service mesh's), which can
// fail after the socket is closed.
type deregisteringListener struct {
	net.Listener
	err error
}

func (l deregisteringListener) Close() error {
	return errors.Join(l.Listener.Close(), l.err)
}

// The HTTP step of an idle server whose listener fails to close says so,
// as ShutdownHTTP, which it runs, does: net/http's Shutdown returns that
// error once every connection is idle, no deadline involved. Fault: rows
// 1840 and 1842 made every Shutdown error met with no connection in a
// request an ok step, meant for a deadline that cut no request, and the
// listener's error went unsaid.
//
//	the server serves, idle; the step runs: Shutdown closes the listener (fails), no connection left
//	the step fails naming the listener's error, as ShutdownHTTP does
func TestHTTPStepOfAnIdleServerSaysItsListenerFailedToClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deregister := errors.New("deregistering from the load balancer: 503 Service Unavailable")
	srv := &http.Server{Handler: http.NewServeMux(), ReadHeaderTimeout: time.Minute}
	step := HTTPServerStep("http", srv, 250*time.Millisecond)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(deregisteringListener{ln, deregister}) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/") // Serve took the listener
	require.NoError(t, err)
	resp.Body.Close()

	_, err = step.Run(t.Context())

	assert.ErrorIs(t, err, deregister)
	assert.ErrorIs(t, <-served, http.ErrServerClosed)
}
