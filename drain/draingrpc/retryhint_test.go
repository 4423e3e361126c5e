package draingrpc

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
)

// retryPolicy is a client's retry of a refusal (gRFC A6): one more attempt,
// after a backoff of a millisecond unless the server pushes back.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`

// arrivals records when each attempt of an RPC reached the server, in
// front of the gate's interceptors.
type arrivals struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *arrivals) arrived() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.times = append(a.times, time.Now())
}

// take returns the arrivals so far and forgets them.
func (a *arrivals) take() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	times := a.times
	a.times = nil
	return times
}

// serveGated serves the worker on loopback behind g's interceptors, every
// method gated as a Create, and returns a client whose connection has
// serviceConfig ("" for none) and the arrivals of its RPCs.
func serveGated(t *testing.T, g *drain.Gate, serviceConfig string) (testgrpc.TestServiceClient, *arrivals) {
	t.Helper()
	seen := &arrivals{}
	classify := Methods(nil, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen.arrived()
			return h(ctx, req)
		}, UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			seen.arrived()
			return h(srv, ss)
		}, StreamServerInterceptor(g, classify)),
	)
	testgrpc.RegisterTestServiceServer(srv, worker{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if serviceConfig != "" {
		opts = append(opts, grpc.WithDefaultServiceConfig(serviceConfig))
	}
	conn, err := grpc.NewClient(ln.Addr().String(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); srv.Stop() })
	return testgrpc.NewTestServiceClient(conn), seen
}

// retryDelay is the google.rpc.RetryInfo's delay in st's details, and
// whether it has one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok {
			return info.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// Fault (the gate review): an RPC the gate refused had codes.Unavailable
// and nothing else, where an HTTP refusal has its 503's Retry-After from
// Gate.RetryAfter: a grpc-go client whose retry policy retries UNAVAILABLE
// retried at its own backoff, a millisecond here, and was refused again at
// once, its attempts spent; a client that reads google.rpc.RetryInfo (Google
// APIs' clients, e2b-style orchestrators) had no delay to wait. A refusal
// now carries both, from the same Gate.RetryAfter: the trailer
// grpc-retry-pushback-ms, which grpc-go's retry waits (gRFC A6), and a
// RetryInfo in the status's details. On loopback, a real client:
//
//	the gate closes, RetryAfter 1.5 s
//	a unary call, then a stream; each attempt refused
//	before:  no trailer, no RetryInfo; the retry 1 ms after the refusal
//	now:     grpc-retry-pushback-ms 1500, RetryInfo 1.5 s; the retry 1.5 s after
//	zero RetryAfter: 5000 and 5 s, as the HTTP refusal's default
func TestARefusedRPCSaysWhenToRetryAndGrpcRetriesThen(t *testing.T) {
	g := &drain.Gate{RetryAfter: 1500 * time.Millisecond}
	c, seen := serveGated(t, g, retryPolicy)
	g.Close()

	var trailer metadata.MD
	_, err := c.EmptyCall(t.Context(), &testgrpc.Empty{}, grpc.Trailer(&trailer))
	assertRetriedAfter(t, 1500*time.Millisecond, err, trailer, seen.take())

	stream, err := c.FullDuplexCall(t.Context())
	require.NoError(t, err)
	_, err = stream.Recv()
	assertRetriedAfter(t, 1500*time.Millisecond, err, stream.Trailer(), seen.take())

	byDefault := &drain.Gate{}
	c, _ = serveGated(t, byDefault, "")
	byDefault.Close()
	_, err = c.EmptyCall(t.Context(), &testgrpc.Empty{}, grpc.Trailer(&trailer))
	assert.Equal(t, []string{"5000"}, trailer.Get("grpc-retry-pushback-ms"))
	delay, ok := retryDelay(status.Convert(err))
	assert.True(t, ok, "a RetryInfo in %v", status.Convert(err).Proto())
	assert.Equal(t, 5*time.Second, delay)
}

// assertRetriedAfter checks a refused RPC's status, its trailer, and that
// its two attempts were delay apart at least, as the pushback asked.
func assertRetriedAfter(t *testing.T, delay time.Duration, err error, trailer metadata.MD, attempts []time.Time) {
	t.Helper()
	st := status.Convert(err)
	assert.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	assert.Contains(t, st.Message(), "node draining")
	assert.Equal(t, []string{strconv.FormatInt(delay.Milliseconds(), 10)}, trailer.Get("grpc-retry-pushback-ms"))
	got, ok := retryDelay(st)
	assert.True(t, ok, "a RetryInfo in %v", st.Proto())
	assert.Equal(t, delay, got)
	require.Len(t, attempts, 2, "the retry policy's two attempts")
	assert.GreaterOrEqual(t, attempts[1].Sub(attempts[0]), delay, "the retry waited for the pushback")
}
