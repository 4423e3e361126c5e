package draingrpc

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a real gRPC server on loopback with the health service,
// Check gated as Create and Watch (a stream) as Resume, unless exempt.
func serve(t *testing.T, g *drain.Gate) (healthpb.HealthClient, *grpc.Server) {
	t.Helper()
	classify := Methods(map[string]drain.Class{
		healthpb.Health_Check_FullMethodName: drain.Create,
		healthpb.Health_Watch_FullMethodName: drain.Resume,
	}, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return healthpb.NewHealthClient(conn), srv
}

func TestInterceptorsAnswerUnavailableOnceDraining(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Resume}}
	client, _ := serve(t, g)
	ctx := t.Context()

	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "admitted while the gate is open")

	g.Close()
	_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "node draining")
	assert.Contains(t, status.Convert(err).Message(), "/grpc.health.v1.Health/Check")

	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err, "the exempt stream still passes")
}

func TestStreamInterceptorGatesStreams(t *testing.T) {
	g := &drain.Gate{}
	client, _ := serve(t, g)
	g.Close()
	stream, err := client.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err))
}

func TestAdmittedStreamCountsAsInFlightUntilItEnds(t *testing.T) {
	g := &drain.Gate{}
	client, _ := serve(t, g)
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	assert.Equal(t, 1, g.InFlight(drain.Resume))
	cancel()
	require.Eventually(t, func() bool { return g.InFlight(drain.Resume) == 0 }, 10*time.Second, time.Millisecond)
}

// stuckServer's GracefulStop waits for an RPC that never ends, until Stop.
type stuckServer struct {
	stop    chan struct{}
	once    sync.Once
	stopped bool
}

func (s *stuckServer) GracefulStop() { <-s.stop }
func (s *stuckServer) Stop()         { s.once.Do(func() { s.stopped = true; close(s.stop) }) }

func TestStopCallsStopAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &stuckServer{stop: make(chan struct{})}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := Stop(ctx, s)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start))
		assert.True(t, s.stopped)
	})
}

func TestStopOnARealServerWithAHangingRPC(t *testing.T) {
	g := &drain.Gate{}
	client, srv := serve(t, g)
	stream, err := client.Watch(t.Context(), &healthpb.HealthCheckRequest{}) // never ends on its own
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	step := Step("grpc", srv, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = step.Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "RPCs still running at the deadline")
	_, err = stream.Recv()
	require.Error(t, err, "Stop cut the stream")
}

func TestStopReturnsNilWhenIdle(t *testing.T) {
	_, srv := serve(t, &drain.Gate{})
	require.NoError(t, Stop(context.Background(), srv))
}
