package draingrpc

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// grpcOnHTTP serves a real grpc-go server through srv's handler
// (ServeHTTP over h2c, gRPC's prior knowledge), with drainkit's
// interceptors on g, the health and reflection services and the test
// service, whose FullDuplexCall is an exempt work RPC (a checkpoint); it
// returns the Drainer of serveWithHTTPStep and a client connection.
func grpcOnHTTP(t *testing.T, g *drain.Gate) (*drain.Drainer, *grpc.ClientConn, <-chan error) {
	t.Helper()
	classify := Methods(map[string]drain.Class{
		testgrpc.TestService_FullDuplexCall_FullMethodName: drain.Checkpoint,
	}, drain.Create)
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)),
	)
	t.Cleanup(gs.Stop)
	testgrpc.RegisterTestServiceServer(gs, worker{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	})}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	d, ln, served := serveWithHTTPStep(t, g, srv)
	conn, err := grpc.NewClient("passthrough:///pipe", grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return ln.Dial(ctx, "tcp", addr) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return d, conn, served
}

// finishWork ends the exempt work RPC work 3 s into the drain, as a
// checkpoint's work does, and returns when it ended, with OK.
func finishWork(t *testing.T, work testgrpc.TestService_FullDuplexCallClient) time.Time {
	t.Helper()
	time.Sleep(3 * time.Second) // the checkpoint's work, in virtual time
	require.NoError(t, work.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err := work.Recv()
	require.NoError(t, err, "the work RPC still runs at 3 s: the step waits for it")
	require.NoError(t, work.CloseSend())
	_, err = work.Recv()
	require.ErrorIs(t, err, io.EOF, "the work RPC ended by itself, with OK")
	return time.Now()
}

// A gRPC server shares the node's http.Server through ServeHTTP (h2c),
// with drainkit's interceptors, and drain's HTTPServerStep shuts that
// server down. An operator's grpcurl keeps a reflection stream open
// between its requests: it never ends by itself, and the gate does not
// count it; an exempt work RPC (a checkpoint) runs on past the start of
// the step. The step waits for the work RPC, then gives what is left (the
// reflection stream) its reserve, and closes it. Fault (row 1351): net/http's
// Shutdown waited for such a stream (then a health Watch, which now ends
// with the preserve phase, row 1496) to the step's deadline, 55 s of a
// 60 s grace where the work was over at 3 s, and the pod stayed
// Terminating that long.
func TestHTTPStepEndsAnUncountedGRPCStreamServedThroughServeHTTPAfterItsReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
		d, conn, served := grpcOnHTTP(t, g)
		ctx := t.Context()
		refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		require.NoError(t, err)
		require.NoError(t, listServices(refl), "reflection answers")
		work, err := openStream(t, ctx, testgrpc.NewTestServiceClient(conn))
		require.NoError(t, err, "the work RPC runs")

		start := time.Now()
		reports := make(chan *drain.Report, 1)
		go func() { reports <- d.Shutdown(context.Background()) }()
		workEnd := finishWork(t, work)

		rep := <-reports
		p := rep.Phase("http")
		require.NotNil(t, p)
		assert.Equal(t, workEnd.Add(time.Second), p.End, "the stream closed the step's reserve after the work RPC ended")
		assert.Less(t, p.End.Sub(start), 55*time.Second, "not held to the step's deadline")
		assert.Equal(t, drain.Failed, p.Result, "a request was cut: %s", p.Error)
		assert.Contains(t, p.Error, "1 connection(s) still in a request 1s after the last operation the gate counted ended (the step's reserve), closed now")
		require.Error(t, rep.Err(), "the Report says it")
		require.Error(t, listServices(refl), "the reflection stream ended with its connection")
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})
}

// A load balancer's health Watch on the same server never ends by itself
// either. It hears NOT_SERVING as the gate closes, and ends, as a
// drain.Stream does, when the preserve phase ends (codes.Unavailable,
// "server stopping"): the step then waits for the work RPC alone and ends
// with it, ok. Fault (row 1496): the Watch ended only at a draingrpc Stop,
// which a server served through ServeHTTP has none of, so the HTTP step
// closed it its reserve after the work and failed, "1 connection(s) still
// in a request", the Report's error and exit 1 on every drain of such a
// server.
func TestHTTPStepIsNotFailedByAHealthWatchServedThroughServeHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
		d, conn, served := grpcOnHTTP(t, g)
		ctx := t.Context()
		watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		r, err := watch.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus())
		work, err := openStream(t, ctx, testgrpc.NewTestServiceClient(conn))
		require.NoError(t, err, "the work RPC runs")

		reports := make(chan *drain.Report, 1)
		go func() { reports <- d.Shutdown(context.Background()) }()
		r, err = watch.Recv()
		require.NoError(t, err)
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus(), "the gate closed")
		_, err = watch.Recv()
		assert.Equal(t, codes.Unavailable, status.Code(err), "the Watch ended: %v", err)
		watchEnd := time.Now()
		workEnd := finishWork(t, work)

		rep := <-reports
		preserve, p := rep.Phase(drain.PhasePreserve), rep.Phase("http")
		require.NotNil(t, preserve)
		require.NotNil(t, p)
		assert.Equal(t, preserve.End, watchEnd, "the Watch ended with the preserve phase")
		assert.Equal(t, drain.OK, p.Result, "%s", p.Error)
		assert.False(t, p.End.Before(workEnd), "the step waited for the work RPC")
		assert.Less(t, p.End.Sub(workEnd), time.Second, "no reserve run out: nothing was left to cut")
		assert.NoError(t, rep.Err())
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})
}

// A request whose handler enters the gate twice, an exempt checkpoint, work
// the gate does not see (an upload of the image), then an exempt delete, is
// in flight when drain's HTTPServerStep begins. Between its two operations
// the gate counts none for a moment. Fault: the step's reserve ran from
// that moment whatever entered the gate after it, and closed the
// connection 1 s after the checkpoint ended, in the middle of the delete,
// which the gate counted: the client's request failed, the step Failed.
// The reserve runs from the last counted operation's end.
func TestHTTPStepReserveRunsFromTheLastCountedOperationsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint, drain.Delete}}
		op := func(c drain.Class, d time.Duration) error {
			leave, err := g.Enter(c)
			if err != nil {
				return err
			}
			defer leave()
			time.Sleep(d) // the operation's work, in virtual time
			return nil
		}
		entered, handled := make(chan struct{}), make(chan struct{})
		var deleted time.Time // the delete's end, read after handled
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			defer close(handled)
			if err := op(drain.Checkpoint, time.Second); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			time.Sleep(500 * time.Millisecond) // the image's upload: no operation of the gate's
			if err := op(drain.Delete, 3*time.Second); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			deleted = time.Now()
			io.WriteString(w, "migrated")
		})}
		d, ln, served := serveWithHTTPStep(t, g, srv)
		client := &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}
		defer client.CloseIdleConnections()
		type answer struct {
			body string
			err  error
		}
		answers := make(chan answer, 1)
		go func() {
			resp, err := client.Get("http://pipe/migrate")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers <- answer{string(b), err}
		}()
		<-entered
		rep := d.Shutdown(context.Background())
		a := <-answers
		<-handled
		assert.NoError(t, a.err, "the delete was cut")
		assert.Equal(t, "migrated", a.body)
		p := rep.Phase("http")
		require.NotNil(t, p)
		assert.Equal(t, drain.OK, p.Result, "%s", p.Error)
		require.False(t, deleted.IsZero(), "the delete ended")
		assert.False(t, p.End.Before(deleted), "the step waited for the delete")
		assert.Less(t, p.End.Sub(deleted), time.Second, "Shutdown's poll closed the idle connection, no reserve was run out")
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	})
}

// serveWithHTTPStep serves srv on an in-memory listener, in a synctest
// bubble, and returns a Drainer of a 60 s grace whose gate is g, with no
// sandboxes, and srv's HTTPServerStep of a 1 s reserve; the listener, and
// what srv.Serve returned once it does.
func serveWithHTTPStep(t *testing.T, g *drain.Gate, srv *http.Server) (*drain.Drainer, *pipenet.Listener, <-chan error) {
	t.Helper()
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{drain.HTTPServerStep("http", srv, time.Second)}})
	require.NoError(t, err)
	ln := pipenet.Listen("pipe")
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return d, ln, served
}
