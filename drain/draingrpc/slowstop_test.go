package draingrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/drainkit/drainkit/drain"
)

// slowClose is a listener whose connections' Close waits until release is
// closed: grpc's Stop, which closes them, then returns no sooner, as on a
// loaded machine (its goroutines not run for 50 ms and more) or over a
// connection slow to close, with no handshake anywhere.
type slowClose struct {
	net.Listener
	release <-chan struct{}
}

func (l slowClose) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowCloseConn{Conn: c, release: l.release}, nil
}

type slowCloseConn struct {
	net.Conn
	release <-chan struct{}
}

func (c *slowCloseConn) Close() error {
	<-c.release
	return c.Conn.Close()
}

// Fault: when grpc's Stop had not returned 50 ms after the deadline
// ("held"), Stop counted every RPC still running on its gate as cut,
// whichever server it was on: it could not tell its server's RPCs from
// another server's sharing the gate (row 1016), and took a held Stop for
// one still in a handshake, which has closed nothing yet. grpc's Stop is
// slower than 50 ms with no handshake at all on a loaded machine, so the
// step of a server with no RPC failed, blaming the stream another server
// ran:
//
//	busy (tcp, loopback)   a stream runs on, admitted through g
//	quiet (unix socket)    a connection that never acks the GOAWAY's ping
//	+0.5 s                 quiet's deadline: grpc's Stop, its Close held
//	+0.55 s                the step returns
//	                       before: "RPCs still running at the deadline"
//	                       after:  nil, and busy's stream answers on
//
// An RPC whose listener still listens is another server's: Stop closed
// every listener of its own first of all, before any handshake could
// hold it.
func TestAStopSlowToReturnIsNotBlamedForAnotherServersRPC(t *testing.T) {
	g := &drain.Gate{}
	release := make(chan struct{})
	defer close(release) // before serve's cleanups Stop the server
	busy := serve(t, g, "tcp")
	quiet := serveWrapped(t, g, "unix", func(l net.Listener) net.Listener { return slowClose{l, release} })
	stream, err := openStream(t, t.Context(), busy.worker) // runs on busy until its client closes it
	require.NoError(t, err)
	quietClient(t, quiet.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond) // below grpc's 5 s wait for the ping
	defer cancel()

	detail, err := Step("grpc-local", quiet.srv, g, time.Second).Run(ctx)
	require.NoError(t, err, "the stopped server ran no RPC: the other server's stream is not its cut")
	assert.Equal(t, heldStop, detail, "grpc's Stop was left running")
	require.NoError(t, stream.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = stream.Recv()
	require.NoError(t, err, "the other server's stream runs on")
	require.NoError(t, stream.CloseSend())
}

// The other side of that rule: a server's own RPC still running when its
// Stop is held in a handshake, before it closed any connection, still
// counts as cut (its listener is closed: the RPC is no other server's),
// although its context is not cancelled yet.
func TestAStopHeldInAHandshakeStillCountsItsOwnRPC(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	_, err := openStream(t, t.Context(), s.worker) // runs until its client closes it
	require.NoError(t, err)
	c, err := net.Dial(s.addr.Network(), s.addr.String())
	require.NoError(t, err)
	// Closing it ends the handshake, and with it grpc's Stop, before goleak looks.
	defer c.Close()
	_, err = c.Write([]byte("PRI * HTTP/2.0")) // part of the preface, then nothing
	require.NoError(t, err)
	waitReading(t, s, c.LocalAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	detail, err := Step("grpc", s.srv, g, time.Second).Run(ctx)
	assert.Equal(t, heldStop, detail)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "RPCs still running at the deadline")
}
