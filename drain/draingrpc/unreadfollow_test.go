package draingrpc

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// backlogFollow is a log follow that sends a sandbox's backlog, 32 MiB a
// message, until a Send fails (its client gone, or the drain ending it).
type backlogFollow struct {
	testgrpc.UnimplementedTestServiceServer
	sent     chan struct{} // closed once the first message is sent
	returned chan error
}

func (f backlogFollow) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	backlog := &testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, 32<<20)}}
	for i := 0; ; i++ {
		if i == 1 {
			close(f.sent)
		}
		if err := s.Send(backlog); err != nil {
			f.returned <- err
			return err
		}
	}
}

// A gRPC log follow of class drain.Stream whose client stopped reading (a
// suspended terminal, a stalled proxy): HTTP/2's flow control holds its
// handler in a Send, which watches the stream's own context, not the one
// the drain cancels when the preserve phase ends. The drain now wakes a
// Send waiting then, as it wakes a RecvMsg (row 270): the handler
// returns, and the grpc step's Stop cuts no RPC, so the step is ok (grpc's
// transport still holds the backlog it queued, and GracefulStop the
// connection, until the step's reserve after the handler returned, row
// 1942). Fault (row 1843): the handler
// stayed in its Send until that Stop, which cut it and failed the drain,
// "RPCs still running at the deadline; stopped them". On loopback:
//
//	the follow sends its backlog; its client reads none of it: the second Send waits
//	the drain: the preserve phase ends, the follow's Send fails (Unavailable, "server stopping")
//	the grpc step: its reserve after that; Stop closes the connection, no RPC in it; ok
func TestAGRPCFollowWhoseClientStoppedReadingEndsWithThePreservePhase(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Stream}} // as the one-call path
	classify := Methods(map[string]drain.Class{testgrpc.TestService_StreamingOutputCall_FullMethodName: drain.Stream}, drain.Create)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)))
	follow := backlogFollow{sent: make(chan struct{}), returned: make(chan error, 1)}
	testgrpc.RegisterTestServiceServer(srv, follow)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = testgrpc.NewTestServiceClient(conn).StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	require.NoError(t, err)
	<-follow.sent // the second Send has 32 MiB to send, more than HTTP/2 lets through unread

	budget, err := deadline.New(6*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{Step("grpc", srv, g, time.Second)}})
	require.NoError(t, err)
	rep := d.Shutdown(context.Background())

	p := rep.Phase("grpc")
	require.NotNil(t, p)
	assert.Equal(t, drain.OK, p.Result, p.Error)
	assert.NoError(t, rep.Err())
	select {
	case err := <-follow.returned:
		assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.Contains(t, status.Convert(err).Message(), "server stopping")
	default:
		t.Error("the follow's handler was still in its Send when the drain ended")
	}
}
