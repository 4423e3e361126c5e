package kubeproxy

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoNode answers every line with its name; the returned func closes it.
func echoNode(t *testing.T, name string) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write([]byte(name + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() { ln.Close(); <-done }
}

// An open connection stays with its node when the node turns not ready; a
// new one goes to the next node that is; with none ready, it is closed.
func TestAConnectionStaysWithItsNodeAndANewOneGoesToAReadyOne(t *testing.T) {
	a, closeA := echoNode(t, "A")
	defer closeA()
	b, closeB := echoNode(t, "B")
	defer closeB()
	var aReady, bReady atomic.Bool
	aReady.Store(true)
	bReady.Store(true)
	svc := Start(t, Endpoint{Addr: a, Ready: aReady.Load}, Endpoint{Addr: b, Ready: bReady.Load})

	ask := func(c net.Conn) (string, error) {
		if _, err := c.Write([]byte("who\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	kept, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer kept.Close()
	got, err := ask(kept)
	require.NoError(t, err)
	assert.Equal(t, "A\n", got)

	aReady.Store(false)
	got, err = ask(kept)
	require.NoError(t, err)
	assert.Equal(t, "A\n", got, "an open connection stays with its node")
	moved, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer moved.Close()
	got, err = ask(moved)
	require.NoError(t, err)
	assert.Equal(t, "B\n", got, "a new connection goes to a ready node")

	bReady.Store(false)
	none, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer none.Close()
	_, err = ask(none)
	assert.Error(t, err, "no endpoint: the connection is closed")
}

// A client that half-closes its connection (CloseWrite: "that is all I
// send") still gets the node's whole answer, as through kube-proxy, whose
// NAT passes the FIN on and leaves the other direction open. Fault: the
// client's EOF closed the connection to the node both ways, so a node that
// answers once it has read the request to its end (a request streamed to
// EOF, `nc -N`) had its answer cut: the client read nothing.
func TestAHalfCloseKeepsTheNodesAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		req, err := io.ReadAll(c) // to the client's EOF
		if err == nil {
			_, err = c.Write(append([]byte("got "), req...))
		}
		served <- err
	}()
	svc := Start(t, Endpoint{Addr: ln.Addr().String(), Ready: func() bool { return true }})

	c, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("the whole request"))
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	answer, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, "got the whole request", string(answer))
	assert.NoError(t, <-served)
}

// cleanups is a testing.TB whose Cleanup funcs the test runs itself, to see
// that they return.
type cleanups struct {
	testing.TB
	fns []func()
}

func (c *cleanups) Cleanup(f func()) { c.fns = append(c.fns, f) }

// When the test ends the Service closes every connection, the node's side
// of one too, and returns. Fault: with the client's EOF passed on as a
// half-close (row 1451), a node that read to that EOF and held its side
// open (a handler that hangs, a server that waits to answer) held the
// relay reading it, and the Service, closing the clients' connections
// alone, waited on it for ever: the test's cleanup hung.
func TestTheTestsEndClosesTheNodesSideOfAConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(held)
			return
		}
		_, _ = io.ReadAll(c) // to the client's EOF; then its side stays open
		held <- c
	}()
	tb := &cleanups{TB: t}
	svc := Start(tb, Endpoint{Addr: ln.Addr().String(), Ready: func() bool { return true }})
	c, err := net.Dial("tcp", svc)
	require.NoError(t, err)
	_, err = c.Write([]byte("bye"))
	require.NoError(t, err)
	require.NoError(t, c.Close())
	node := <-held
	require.NotNil(t, node)
	defer node.Close()

	ended := make(chan struct{})
	go func() {
		for _, f := range tb.fns {
			f()
		}
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second): // a guard against a hang, not a measure
		t.Error("the Service's cleanup did not return: the node's side of the connection was left open")
		_ = node.Close() // lets it return
		<-ended
	}
}
