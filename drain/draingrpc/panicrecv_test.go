package draingrpc

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
)

// recoverPanics is a user's recovery interceptor (as grpc-ecosystem's
// recovery middleware): a handler's panic is the RPC's codes.Internal,
// not the process's end, which grpc-go, recovering none, leaves it.
func recoverPanics(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Errorf(codes.Internal, "handler panicked: %v", v)
		}
	}()
	return h(srv, ss)
}

// countMessages is a user's metrics interceptor whose stream's RecvMsg
// and SendMsg panic: they count into a map its author never made.
func countMessages(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, messageCounter{ServerStream: ss})
}

type messageCounter struct {
	grpc.ServerStream
	count map[string]int
}

func (s messageCounter) RecvMsg(m any) error {
	s.count["received"]++
	return s.ServerStream.RecvMsg(m)
}

func (s messageCounter) SendMsg(m any) error {
	s.count["sent"]++
	return s.ServerStream.SendMsg(m)
}

// A receive or a send that panics in the handler of a drain.Stream or of
// server reflection (a user's stream wrapper outside draingrpc's
// interceptor, a codec) panics on the handler's goroutine, where the
// user's recovery interceptor makes it the RPC's codes.Internal, and the
// server serves on. Their RecvMsg and SendMsg run in a goroutine of
// draingrpc's, so that the drain can end a stream waiting in one: the
// panic came there, out of every recover, and ended the process, where
// without draingrpc the recovery interceptor caught it.
func TestAPanicInAStreamsReceiveOrSendReachesTheUsersRecovery(t *testing.T) {
	g := &drain.Gate{}
	classify := Methods(map[string]drain.Class{testgrpc.TestService_StreamingOutputCall_FullMethodName: drain.Stream}, drain.Create)
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(recoverPanics, countMessages, StreamServerInterceptor(g, classify)))
	testgrpc.RegisterTestServiceServer(srv, worker{})
	reflection.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := testgrpc.NewTestServiceClient(conn)

	for range 2 { // the server still serves after the first
		follow, err := c.StreamingOutputCall(t.Context(), &testgrpc.StreamingOutputCallRequest{})
		require.NoError(t, err)
		_, err = follow.Recv()
		assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
		assert.ErrorContains(t, err, "handler panicked: assignment to entry in nil map")
	}
	info, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)
	// The handler's first receive panics before the request comes: the
	// Send may find the stream ended (io.EOF), its status for Recv to say.
	err = info.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if !errors.Is(err, io.EOF) {
		require.NoError(t, err)
	}
	_, err = info.Recv()
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "handler panicked: assignment to entry in nil map")
	_, err = c.EmptyCall(context.Background(), &testgrpc.Empty{})
	assert.NoError(t, err)
	assert.Zero(t, g.InFlight(drain.Stream))
}
