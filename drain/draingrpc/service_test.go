package draingrpc

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/kubeproxy"
)

// Fault (a review of the gate against a client behind a Service): the
// interceptors' doc said a refused RPC is answered codes.Unavailable "so
// clients retry on another node". A gRPC client keeps one connection, and
// behind a Service's virtual IP that connection stays with the node it was
// first sent to: the health service's NOT_SERVING takes the node out of
// the endpoints for new connections only, and grpc-go has no way for a
// handler or an interceptor to close one connection (nothing like HTTP's
// Connection: close, row 1010). Wired as the doc said, every retry came
// back to the draining node and was refused, until the grpc step's
// GracefulStop at the drain's end: on loopback, through a Service of two
// nodes, 999 of 999 retries in 10 s refused by the draining node. The doc
// now says so, and how a server behind a Service moves such a client: a
// keepalive MaxConnectionAge, whose GOAWAY makes the client connect again
// (to a node still ready) while RPCs already admitted on the old connection
// run to their end, MaxConnectionAgeGrace left unset. As the doc now wires
// it: the retry lands on the other node, and a checkpoint admitted before
// the gate closed still runs on the draining one.
func TestARefusedClientBehindAServiceRetriesOnAnotherNode(t *testing.T) {
	// Short, for the test: the doc's advice is tens of seconds.
	age := grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 300 * time.Millisecond})
	draining := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	a, b := namedNode(t, "A", draining, age), namedNode(t, "B", &drain.Gate{}, age)
	svc := kubeproxy.Start(t, a, b)
	conn, err := grpc.NewClient(svc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a bound on the failure, not a timing assertion
	defer cancel()
	served := func() (string, error) {
		r, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return r.GetUsername(), err
	}

	var on string
	for on != "A" { // a connection to A, as the Service made it before the drain
		on, err = served()
		require.NoError(t, err)
	}
	checkpoint, err := openStream(t, ctx, client) // a Checkpoint, exempt: admitted on A before the gate closes
	require.NoError(t, err)
	draining.Close() // node A's preStop call
	refused := 0
	tick := time.NewTicker(10 * time.Millisecond) // the client's retries, as codes.Unavailable asks
	defer tick.Stop()
	for on != "B" {
		on, err = served()
		if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
			refused++
			<-tick.C
			continue
		}
		require.NoError(t, err, "after %d refusals by the draining node", refused)
		require.Equal(t, "B", on, "served by the draining node")
	}
	t.Logf("served by B after %d refusals by A", refused)

	require.NoError(t, checkpoint.Send(&testgrpc.StreamingOutputCallRequest{}), "the checkpoint admitted on A runs on")
	_, err = checkpoint.Recv()
	require.NoError(t, err, "the checkpoint admitted on A runs on")
	require.NoError(t, checkpoint.CloseSend())
	_, err = checkpoint.Recv()
	assert.ErrorIs(t, err, io.EOF, "the checkpoint ended as its handler did")
}

// namedWorker is a worker whose UnaryCall answers with its node's name.
type namedWorker struct {
	worker
	name string
}

func (w namedWorker) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Username: w.name}, nil
}

// namedNode serves a gRPC node on loopback, with the interceptors over g
// (FullDuplexCall is a Checkpoint, every other method a Create), behind a
// Service: ready while its health service says SERVING, as a gRPC
// readiness probe asks it.
func namedNode(t *testing.T, name string, g *drain.Gate, opts ...grpc.ServerOption) kubeproxy.Endpoint {
	t.Helper()
	classify := Methods(map[string]drain.Class{testgrpc.TestService_FullDuplexCall_FullMethodName: drain.Checkpoint}, drain.Create)
	srv := grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)))...)
	testgrpc.RegisterTestServiceServer(srv, namedWorker{name: name})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	probe, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { probe.Close(); srv.Stop() })
	hc := healthpb.NewHealthClient(probe)
	return kubeproxy.Endpoint{Addr: ln.Addr().String(), Ready: func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}}
}
