package draingrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(listenEnv); spec != "" {
		os.Exit(listenUntilStdinEnds(spec))
	}
	goleak.VerifyTestMain(m)
}

// listenEnv, set to a network and an address ("tcp 127.0.0.1:8443"), runs
// the test binary as another process that listens there (see
// listenInAnotherProcess).
const listenEnv = "DRAINKIT_TEST_LISTEN"

// listenUntilStdinEnds listens on spec's address, says so on stdout, and
// keeps listening until its stdin ends; it returns the process's exit
// code. A Unix socket's path is removed first, as a server starting
// removes a stale one (its predecessor's, still serving or not).
func listenUntilStdinEnds(spec string) int {
	network, addr, _ := strings.Cut(spec, " ")
	if network == "unix" {
		_ = os.Remove(addr)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	fmt.Println("listening")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// worker is a real gRPC service besides health: EmptyCall (unary) stands
// for a create, FullDuplexCall (a stream that echoes until the client
// closes) for a long operation.
type worker struct {
	testgrpc.UnimplementedTestServiceServer
}

func (worker) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// StreamingOutputCall stands for a log follow: it sends one message, then
// streams until its context ends.
func (worker) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

// UnaryCall stands for a long-poll (a wait for a sandbox's next event):
// it answers when its context ends, or at once when the request says so
// (ResponseSize 0 asks to wait).
func (worker) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if req.GetResponseSize() == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (worker) FullDuplexCall(s testgrpc.TestService_FullDuplexCallServer) error {
	for {
		if _, err := s.Recv(); err != nil {
			return nil
		}
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// server is a real gRPC server with drainkit's interceptors, the worker
// service, the standard health server and server reflection, and clients
// of the three.
type server struct {
	srv    *grpc.Server
	health *health.Server
	worker testgrpc.TestServiceClient
	hc     healthpb.HealthClient
	refl   reflectionpb.ServerReflectionClient
	addr   net.Addr // where it listens
	// reading receives the client address of each connection the server
	// began to read: past grpc's check that it is stopping, in the
	// handshake. A connection only dialed may still wait in the accept
	// queue, and GracefulStop then closes it unread.
	reading chan net.Addr
	closed  chan struct{}                           // closed when grpc closed its listener
	dial    func(context.Context) (net.Conn, error) // how its client connects
}

// waitReading waits until the server began to read the connection from
// client.
func waitReading(t *testing.T, s *server, client net.Addr) {
	t.Helper()
	bound := time.After(10 * time.Second) // a bound on the failure, not a timing assertion
	for {
		select {
		case a := <-s.reading:
			if a.String() == client.String() {
				return
			}
		case <-bound:
			t.Fatalf("the server never read the connection from %v", client)
		}
	}
}

// closeSignal is a listener that closes closed when it is closed.
type closeSignal struct {
	net.Listener
	closed chan<- struct{}
	once   *sync.Once
}

func (l closeSignal) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

// readSignal is a listener whose connections send their remote address to
// reading at their first Read.
type readSignal struct {
	net.Listener
	reading chan<- net.Addr
}

func (l readSignal) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &signalConn{Conn: c, reading: l.reading}, nil
}

type signalConn struct {
	net.Conn
	once    sync.Once
	reading chan<- net.Addr
}

func (c *signalConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		select {
		case c.reading <- c.RemoteAddr():
		default: // nobody waits for it
		}
	})
	return c.Conn.Read(b)
}

// serve starts a server on network ("tcp" on loopback, or "unix") with
// EmptyCall gated as Create, FullDuplexCall as Checkpoint, and
// StreamingOutputCall and UnaryCall (a long-poll) as Stream.
func serve(t *testing.T, g *drain.Gate, network string) *server {
	t.Helper()
	return serveWrapped(t, g, network, func(l net.Listener) net.Listener { return l })
}

// serveWrapped is serve with the server's listener wrapped by wrap.
func serveWrapped(t *testing.T, g *drain.Gate, network string, wrap func(net.Listener) net.Listener) *server {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "grpc.sock")
	}
	ln, err := net.Listen(network, addr)
	require.NoError(t, err)
	return serveOn(t, g, ln, wrap, dialing(ln.Addr()))
}

// dialing dials addr.
func dialing(addr net.Addr) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, addr.Network(), addr.String())
	}
}

// serveOn is serveWrapped on ln, whose client connects through dial; the
// server has opts before drainkit's interceptors.
func serveOn(t *testing.T, g *drain.Gate, ln net.Listener, wrap func(net.Listener) net.Listener, dial func(context.Context) (net.Conn, error), opts ...grpc.ServerOption) *server {
	t.Helper()
	classify := Methods(map[string]drain.Class{
		testgrpc.TestService_EmptyCall_FullMethodName:           drain.Create,
		testgrpc.TestService_FullDuplexCall_FullMethodName:      drain.Checkpoint,
		testgrpc.TestService_StreamingOutputCall_FullMethodName: drain.Stream,
		testgrpc.TestService_UnaryCall_FullMethodName:           drain.Stream,
	}, drain.Create)
	s := &server{health: health.NewServer(), reading: make(chan net.Addr, 16), closed: make(chan struct{}), dial: dial}
	s.srv = grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)),
	)...)
	testgrpc.RegisterTestServiceServer(s.srv, worker{})
	healthpb.RegisterHealthServer(s.srv, s.health)
	reflection.Register(s.srv)
	go func() { _ = s.srv.Serve(closeSignal{wrap(readSignal{ln, s.reading}), s.closed, new(sync.Once)}) }()
	s.addr = ln.Addr()
	conn, err := grpc.NewClient("passthrough:///localhost", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); s.srv.Stop() })
	s.worker, s.hc = testgrpc.NewTestServiceClient(conn), healthpb.NewHealthClient(conn)
	s.refl = reflectionpb.NewServerReflectionClient(conn)
	return s
}

// openStream opens a FullDuplexCall and waits until its handler runs.
func openStream(t *testing.T, ctx context.Context, c testgrpc.TestServiceClient) (testgrpc.TestService_FullDuplexCallClient, error) {
	t.Helper()
	stream, err := c.FullDuplexCall(ctx)
	require.NoError(t, err)
	// A Send on a stream the server already ended returns io.EOF; the
	// stream's status is what the Recv below returns (grpc's ClientStream
	// contract), so the error is read there either way.
	if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	_, err = stream.Recv()
	return stream, err
}

func TestInterceptorsAnswerUnavailableOnceDraining(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	s := serve(t, g, "tcp")
	ctx := t.Context()

	_, err := s.worker.EmptyCall(ctx, &testgrpc.Empty{})
	require.NoError(t, err, "admitted while the gate is open")

	g.Close()
	_, err = s.worker.EmptyCall(ctx, &testgrpc.Empty{})
	require.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "node draining")
	assert.Contains(t, status.Convert(err).Message(), testgrpc.TestService_EmptyCall_FullMethodName)

	_, err = openStream(t, ctx, s.worker)
	require.NoError(t, err, "the exempt stream still passes")
}

func TestStreamInterceptorGatesStreams(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	g.Close()
	_, err := openStream(t, t.Context(), s.worker)
	require.Equal(t, codes.Unavailable, status.Code(err))
}

func TestAdmittedStreamCountsAsInFlightUntilItEnds(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	ctx, cancel := context.WithCancel(t.Context())
	_, err := openStream(t, ctx, s.worker)
	require.NoError(t, err)
	assert.Equal(t, 1, g.InFlight(drain.Checkpoint))
	cancel()
	require.Eventually(t, func() bool { return g.InFlight(drain.Checkpoint) == 0 }, 10*time.Second, time.Millisecond)
}

// The default gated class gates everything, yet health is never gated: it
// answers, and says NOT_SERVING from the moment the gate closes, for the
// server ("") and every service, over a Unix socket as on loopback.
func TestHealthIsNeverGatedAndReportsNotServingOnceDraining(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			g := &drain.Gate{}
			budget, err := deadline.New(60*time.Second, deadline.Config{})
			require.NoError(t, err)
			_, err = drain.New(drain.Config{Budget: budget, Gate: g, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
				Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })})
			require.NoError(t, err)
			s := serve(t, g, network)
			s.health.SetServingStatus("worker", healthpb.HealthCheckResponse_SERVING)
			ctx := t.Context()
			check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
				r, err := s.hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
				return r.GetStatus(), err
			}
			st, err := check("")
			require.NoError(t, err)
			assert.Equal(t, healthpb.HealthCheckResponse_SERVING, st)

			g.Close()
			for _, svc := range []string{"", "worker"} {
				st, err := check(svc)
				require.NoError(t, err, "health is not gated")
				assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st, "service %q", svc)
			}
			_, err = check("nope")
			assert.Equal(t, codes.NotFound, status.Code(err), "an unknown service stays unknown")
			list, err := s.hc.List(ctx, &healthpb.HealthListRequest{})
			require.NoError(t, err)
			require.Len(t, list.GetStatuses(), 2)
			for name, st := range list.GetStatuses() {
				assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st.GetStatus(), name)
			}
			st, err = check("")
			require.NoError(t, err)
			assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st, "the health server's own answer was not changed")

			_, err = s.worker.EmptyCall(ctx, &testgrpc.Empty{})
			require.Equal(t, codes.Unavailable, status.Code(err), "work is still gated")

			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(ctx, &rm))
			var rejected int64
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name == "drainkit.drain.gate.rejections" {
						for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
							rejected += dp.Value
						}
					}
				}
			}
			assert.Equal(t, int64(1), rejected, "the one gated RPC; health calls are not rejections")
		})
	}
}

// A Watch open when the gate closes hears NOT_SERVING at once although the
// health server did not change, and never SERVING after it; it is not an
// operation in flight, so the gate's wait does not wait for it.
func TestHealthWatchTurnsNotServingWhenTheGateCloses(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "unix")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a Recv that never comes fails, not hangs
	defer cancel()
	watch, err := s.hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	r, err := watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus())

	g.Close()
	r, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus())

	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING) // suppressed: the node drains
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_UNKNOWN)
	r, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_UNKNOWN, r.GetStatus(), "no SERVING came in between")

	wctx, wcancel := context.WithTimeout(t.Context(), time.Second)
	defer wcancel()
	require.NoError(t, g.Wait(wctx), "an open Watch is not a gated operation in flight")
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
		err := Stop(ctx, s, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start))
		assert.True(t, s.stopped)
	})
}

func TestStopOnARealServerWithAHangingRPC(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	stream, err := openStream(t, t.Context(), s.worker) // never ends on its own
	require.NoError(t, err)
	step := Step("grpc", s.srv, g, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = step.Run(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "RPCs still running at the deadline")
	_, err = stream.Recv()
	require.Error(t, err, "Stop cut the stream")
}

func TestStopReturnsNilWhenIdle(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	require.NoError(t, Stop(context.Background(), s.srv, g))
}

// quietClient opens an HTTP/2 connection to addr, as a gRPC client does,
// and returns once the server has taken it (it acknowledged the client's
// settings); the caller then neither reads nor writes: a client whose node
// went away without closing it, or whose process is frozen.
func quietClient(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial(addr.Network(), addr.String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	preface := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	_, err = c.Write(append(preface, 0, 0, 0, 4, 0, 0, 0, 0, 0)) // and an empty SETTINGS frame
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second))) // a bound on the failure
	for {
		var h [9]byte // length (3 bytes), type, flags, stream
		_, err := io.ReadFull(c, h[:])
		require.NoError(t, err)
		_, err = io.CopyN(io.Discard, c, int64(h[0])<<16|int64(h[1])<<8|int64(h[2]))
		require.NoError(t, err)
		if h[3] == 4 && h[4]&1 != 0 { // SETTINGS with ACK
			return c
		}
	}
}

// Fault: a client connection with no RPC that never acknowledges the
// GOAWAY's ping (its node gone without closing it, its process frozen)
// holds grpc's GracefulStop for 5 s, so the step hit its deadline, Stop
// closed the connection, and the step failed with "RPCs still running at
// the deadline; stopped them" while no RPC ran: a drain that cut nothing
// reported a fault, exit 1. Stop now tells, by the RPCs its interceptors
// count, that closing the connections cut no RPC, and returns nil.
// Before: the step's error after its 0.5 s; after: nil after the 0.5 s.
func TestAQuietConnectionWithNoRPCAtTheDeadlineIsNoFault(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	_, err := s.worker.EmptyCall(t.Context(), &testgrpc.Empty{}) // an RPC that ended: the count is not 0 for nothing
	require.NoError(t, err)
	quietClient(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond) // below grpc's 5 s wait for the ping
	defer cancel()
	_, err = Step("grpc", s.srv, g, time.Second).Run(ctx)
	require.NoError(t, err, "no RPC ran: closing the quiet connection cut nothing")
}

// A server whose streams do not pass through g's interceptors (only the
// unary one is installed) may run a stream Stop does not count: Stop
// cutting it at the deadline still says so.
func TestStopCannotVouchForRPCsItsInterceptorsDoNotSee(t *testing.T) {
	g := &drain.Gate{}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, Methods(nil, drain.Create))))
	testgrpc.RegisterTestServiceServer(srv, worker{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = openStream(t, t.Context(), testgrpc.NewTestServiceClient(conn)) // never ends on its own
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, Stop(ctx, srv, g), context.DeadlineExceeded, "the stream was cut")
}

// stuckWorker's EmptyCall ignores its context until release is closed: a handler blocked
// in a call that takes no context (a runtime command, a lock).
type stuckWorker struct {
	testgrpc.UnimplementedTestServiceServer
	entered chan struct{}
	release chan struct{}
}

func (w stuckWorker) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	close(w.entered)
	<-w.release
	return &testgrpc.Empty{}, nil
}

// A handler that ignores its cancelled context does not hold Stop past its deadline:
// grpc's GracefulStop waits for every handler to return even once Stop has closed the
// connections, and Stop waited for GracefulStop, so one stuck handler held the step
// until it was abandoned (and a caller of Stop for ever). Stop now returns once Stop has
// closed the connections; the handler goes on until it returns, its RPC already ended.
func TestStopReturnsAtTheDeadlineWhenAHandlerIgnoresItsContext(t *testing.T) {
	w := stuckWorker{entered: make(chan struct{}), release: make(chan struct{})}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, w)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	defer func() { <-served }()
	defer close(w.release) // the handler returns at the end of the test, after Stop's check
	calls := make(chan error, 1)
	go func() {
		_, err := testgrpc.NewTestServiceClient(conn).EmptyCall(context.Background(), &testgrpc.Empty{})
		calls <- err
	}()
	<-w.entered

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- Stop(ctx, srv, nil) }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(30 * time.Second): // a bound on the failure, not a timing
		t.Fatal("Stop did not return while a handler ignored its cancelled context")
	}
	require.Error(t, <-calls, "the RPC ended with its connection")
}

// A stream the drain never waits for (drain.Stream: here a
// StreamingOutputCall its client keeps open, as a log follow) ends as Stop
// begins, with
// Unavailable, "server stopping", so GracefulStop returns at once instead
// of waiting for it until its deadline and then cutting every RPC: before,
// Stop returned the deadline's error after the 5 s and the step failed.
func TestStopEndsAStreamOfClassStream(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow, err := s.worker.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = follow.Recv()
	require.NoError(t, err, "the stream is open")
	assert.Equal(t, 1, g.InFlight(drain.Stream))
	require.True(t, g.Close())
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	require.NoError(t, Stop(stopCtx, s.srv, g), "GracefulStop returned: the stream ended as Stop began")
	_, err = follow.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "server stopping")
	assert.Zero(t, g.InFlight(drain.Stream))
}

// A unary RPC of class drain.Stream (a long-poll, which drain.Stream's doc
// names) ends as Stop begins, as a streaming one does, with Unavailable,
// "server stopping": before, the unary interceptor ran it with its own
// context alone, so GracefulStop waited for it until Stop's deadline, then
// Stop cut every RPC and the step failed (Stop returned the deadline's
// error after the 2 s).
func TestStopEndsAUnaryCallOfClassStream(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polled := make(chan error, 1)
	go func() {
		_, err := s.worker.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		polled <- err
	}()
	require.Eventually(t, func() bool { return g.InFlight(drain.Stream) == 1 }, 5*time.Second, time.Millisecond, "the long-poll is in its handler")
	require.True(t, g.Close())
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer stopCancel()
	require.NoError(t, Stop(stopCtx, s.srv, g), "GracefulStop returned: the long-poll ended as Stop began")
	err := <-polled
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "server stopping")
	assert.Zero(t, g.InFlight(drain.Stream))
}

// Fault: a gRPC stream of class drain.Stream ended at the grpc step's
// Stop, an HTTP one the same gate admitted as the preserve phase ended:
// with a step before the grpc one (the ublk teardown), a log follow over
// gRPC stayed open through it, following a sandbox already preserved, and
// one opened then was served, where HTTP answered 503. Both now end at
// the one moment the gate says streams end (drain.Gate.StreamsEnded, the
// preserve phase's end): the follow ends with Unavailable before the
// first step runs, and one opened after it is refused, exempt or not.
// Before: the first step's 5 s guard ran out with the follow still open.
func TestAStreamEndsWithThePreservePhaseNotAtTheGrpcStep(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Stream}} // as the one-call path
	s := serve(t, g, "tcp")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow, err := s.worker.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	require.NoError(t, err)
	_, err = follow.Recv()
	require.NoError(t, err, "the stream is open")
	followEnded := make(chan error, 1)
	go func() {
		_, err := follow.Recv()
		followEnded <- err
	}()

	var ended, fresh error
	teardown := drain.NewStep(deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(time.Second)}, func(ctx context.Context) (any, error) {
		guard := time.NewTimer(5 * time.Second) // a hang guard, not a timing assertion
		defer guard.Stop()
		select {
		case ended = <-followEnded:
		case <-guard.C:
			return nil, errors.New("the follow was still open when the first step ran")
		}
		again, err := s.worker.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err == nil {
			_, err = again.Recv()
		}
		fresh = err
		return nil, nil
	})
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{teardown, Step("grpc", s.srv, g, 5*time.Second)}})
	require.NoError(t, err)

	rep := d.Shutdown(context.Background())
	td := rep.Phase("teardown")
	require.Equal(t, drain.OK, td.Result, td.Error)
	assert.Equal(t, codes.Unavailable, status.Code(ended), "%v", ended)
	assert.Contains(t, status.Convert(ended).Message(), "server stopping")
	assert.Equal(t, codes.Unavailable, status.Code(fresh), "a stream opened after: %v", fresh)
	assert.Contains(t, status.Convert(fresh).Message(), "node draining", "refused, not served")
	grpcStep := rep.Phase("grpc")
	assert.Equal(t, drain.OK, grpcStep.Result, grpcStep.Error)
	require.NoError(t, rep.Err())
}

// Fault: a connection still in its handshake (a client that connected and
// sent nothing: a stalled TLS proxy, a port scanner holding the socket)
// holds grpc's GracefulStop and its Stop alike until grpc.ConnectionTimeout,
// 120 s unless set. Stop called grpc's Stop at the deadline and waited for
// it: the step did not return, the drain abandoned it (a fault, exit 1)
// and the process ran on towards SIGKILL. Stop now waits for grpc's Stop a
// moment only; with no RPC running it cut nothing, so the step succeeds,
// its detail saying grpc's Stop was left running.
// Before: no return within 10 s (grpc's Stop returned at 120 s); after:
// nil, with the detail, moments after the 200 ms deadline.
func TestAConnectionInItsHandshakeDoesNotHoldTheStep(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "tcp")
	c, err := net.Dial(s.addr.Network(), s.addr.String())
	require.NoError(t, err)
	// Closing it ends the handshake, and with it grpc's Stop, before goleak looks.
	defer c.Close()
	_, err = c.Write([]byte("PRI * HTTP/2.0")) // part of the preface, then nothing
	require.NoError(t, err)
	waitReading(t, s, c.LocalAddr()) // until the server holds it in its handshake

	type result struct {
		detail any
		err    error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		detail, err := Step("grpc", s.srv, g, time.Second).Run(ctx)
		done <- result{detail, err}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err, "the connection in its handshake had no RPC to cut")
		assert.Equal(t, heldStop, r.detail)
	case <-time.After(10 * time.Second): // a bound on the failure, not a timing assertion
		t.Fatal("the step did not return: grpc's Stop held it")
	}
}

// Fault: Stop, and the Step made with it, with no server (a nil Server, or
// a nil *grpc.Server in it: one never made) panicked with a nil
// dereference in grpc's GracefulStop, at SIGTERM. They now return an error
// saying the Server is nil. docs/faults.md row 242.
func TestStopOfNoServerFailsSayingSo(t *testing.T) {
	g := &drain.Gate{}
	for name, s := range map[string]Server{"nil": nil, "nil *grpc.Server": (*grpc.Server)(nil)} {
		require.ErrorContains(t, Stop(t.Context(), s, g), "draingrpc: the Server is nil", name)
		_, err := Step("grpc", s, g, time.Second).Run(t.Context())
		require.ErrorContains(t, err, "the Server is nil", name)
	}
}

// A nil Gate or Classifier is a wiring mistake found when the server is
// built, by name, not a panic in every RPC (which gRPC does not recover:
// the process would die at the first request).
func TestNilGateOrClassifierPanicsWhenBuiltNamingIt(t *testing.T) {
	classify := Methods(nil, drain.Create)
	assert.PanicsWithValue(t, "draingrpc: UnaryServerInterceptor: nil *drain.Gate (a zero drain.Gate{} is an open gate)",
		func() { UnaryServerInterceptor(nil, classify) })
	assert.PanicsWithValue(t, "draingrpc: StreamServerInterceptor: nil *drain.Gate (a zero drain.Gate{} is an open gate)",
		func() { StreamServerInterceptor(nil, classify) })
	assert.PanicsWithValue(t, "draingrpc: UnaryServerInterceptor: nil Classifier (draingrpc.Methods builds one)",
		func() { UnaryServerInterceptor(&drain.Gate{}, nil) })
	assert.PanicsWithValue(t, "draingrpc: StreamServerInterceptor: nil Classifier (draingrpc.Methods builds one)",
		func() { StreamServerInterceptor(&drain.Gate{}, nil) })
}

// attachWorker's FullDuplexCall is an attach as servers write one: the
// handler loops on Recv (the user's input) and returns when it fails, its
// output in a goroutine of its own, ended by the stream's context.
type attachWorker struct {
	testgrpc.UnimplementedTestServiceServer
}

func (attachWorker) FullDuplexCall(s testgrpc.TestService_FullDuplexCallServer) error {
	go func() {
		_ = s.Send(&testgrpc.StreamingOutputCallResponse{}) // the first output; later ones until s.Context() ends
		<-s.Context().Done()
	}()
	for {
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
}

// Fault: a bidirectional stream of class drain.Stream (an attach) whose
// handler waits in Recv for its client's next input, as an attach's
// handler does, was not ended when the preserve phase ended: its context
// was cancelled, but grpc's Recv does not watch that context, so the
// handler stayed in it. GracefulStop waited for it until the grpc step's
// deadline, Stop then cut it (its client saw the connection close, not
// "server stopping"), and the step failed with "RPCs still running at
// the deadline": exit 1 with every sandbox preserved, the step's reserve
// spent. Its RecvMsg now returns Unavailable, "server stopping", as the
// streams end, as a reflection stream's does at Stop.
func TestAnAttachWaitingInRecvEndsWithThePreservePhase(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Stream}} // as the one-call path
	classify := Methods(map[string]drain.Class{testgrpc.TestService_FullDuplexCall_FullMethodName: drain.Stream}, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)),
	)
	testgrpc.RegisterTestServiceServer(srv, attachWorker{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(); srv.Stop() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attach, err := testgrpc.NewTestServiceClient(conn).FullDuplexCall(ctx)
	require.NoError(t, err)
	_, err = attach.Recv()
	require.NoError(t, err, "the attach is open, its handler waiting in Recv")
	require.Equal(t, 1, g.InFlight(drain.Stream))

	budget, err := deadline.New(4*time.Second, deadline.Config{}) // the grpc step ends by 2.5 s
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{Step("grpc", srv, g, time.Second)}})
	require.NoError(t, err)
	rep := d.Shutdown(context.Background())

	grpcStep := rep.Phase("grpc")
	assert.Equal(t, drain.OK, grpcStep.Result, "the attach held GracefulStop: %s", grpcStep.Error)
	assert.NoError(t, rep.Err())
	_, err = attach.Recv()
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "server stopping", "ended by the drain, not cut with its connection")
	assert.Zero(t, g.InFlight(drain.Stream))
}

// A drain whose grpc step stopped the server before Serve began (a SIGTERM
// during a slow start, nothing to preserve) has Serve return
// grpc.ErrServerStopped, not nil: docs/drain.md's wiring, which drains and
// exits 1 when serving stops on its own, takes that error for the step's
// own stop, not for a failure.
func TestServeAfterTheGrpcStepStoppedTheServerSaysErrServerStopped(t *testing.T) {
	g := &drain.Gate{}
	srv := grpc.NewServer()
	_, err := Step("grpc", srv, g, time.Second).Run(t.Context())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = srv.Serve(ln)
	assert.ErrorIs(t, err, grpc.ErrServerStopped)
	_, err = net.Dial("tcp", ln.Addr().String())
	assert.Error(t, err, "Serve closed the listener")
}

// Fault: a Methods table entry that is not a full method name (the
// leading slash forgotten, "worker.Worker/Checkpoint", or the service
// left out) never matched any RPC, silently: its method got the default
// class, so a Checkpoint meant to pass while the node drains was refused
// with codes.Unavailable from the preStop call on, and nothing said why
// until then. Methods now panics when the server is built, naming the
// entry, as the interceptors do for a nil gate.
func TestMethodsRefusesAnEntryThatIsNoFullMethodName(t *testing.T) {
	for _, bad := range []string{"worker.Worker/Checkpoint", "/worker.Worker", "/Checkpoint", "//Checkpoint", "/worker.Worker/", "/worker.Worker/Checkpoint/x", ""} {
		assert.PanicsWithValue(t, `draingrpc: Methods: `+strconvQuote(bad)+` is not a full method name ("/package.Service/Method", as the generated _FullMethodName constants spell it): no RPC would match it, and its method would get the default class`,
			func() { Methods(map[string]drain.Class{bad: drain.Checkpoint}, drain.Create) }, bad)
	}
	classify := Methods(map[string]drain.Class{"/worker.Worker/Checkpoint": drain.Checkpoint}, drain.Create)
	assert.Equal(t, drain.Checkpoint, classify("/worker.Worker/Checkpoint"))
	assert.Equal(t, drain.Create, classify("/worker.Worker/Run"))
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }

// Fault: two servers sharing one gate (a TCP one for the cluster, a unix
// socket one for the node's agent) shared Stop's count of RPCs: the step
// of a server with no RPC, held to its deadline by a quiet connection,
// failed with "RPCs still running at the deadline; stopped them" because
// of an RPC running on the other server, which its Stop never touched. Stop
// now counts as cut only the RPCs its Stop ended: the ones whose context
// that Stop cancelled.
// Before: the step's error after its 0.5 s; after: nil, and the other
// server's stream still answers.
// A grpc's Stop slow to return (a loaded machine) does not change that:
// TestAStopSlowToReturnIsNotBlamedForAnotherServersRPC (row 2381).
func TestStopIsNotBlamedForAnotherServersRPCOnTheSameGate(t *testing.T) {
	g := &drain.Gate{}
	busy, quiet := serve(t, g, "tcp"), serve(t, g, "unix")
	stream, err := openStream(t, t.Context(), busy.worker) // runs on busy until its client closes it
	require.NoError(t, err)
	quietClient(t, quiet.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond) // below grpc's 5 s wait for the ping
	defer cancel()
	_, err = Step("grpc-local", quiet.srv, g, time.Second).Run(ctx)
	require.NoError(t, err, "the stopped server ran no RPC: closing its quiet connection cut nothing")
	require.NoError(t, stream.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = stream.Recv()
	require.NoError(t, err, "the other server's stream runs on")
	require.NoError(t, stream.CloseSend())
}
