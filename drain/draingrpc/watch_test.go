package draingrpc

import (
	"context"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// requireStopping asserts that err is the status of a health Watch that
// Stop ended.
func requireStopping(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err, "the Watch ended")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "server stopping")
}

// A load balancer (or a client in another language) keeps a raw health
// Watch open on the node while a work RPC (here an exempt one, like a
// checkpoint) is still running when the drain reaches its grpc step. The
// Watch hears NOT_SERVING when the gate closes and ends with the step; the
// step waits for the work RPC, not for the Watch, and reports no fault. It
// used to wait for the Watch until its deadline, then cut the work RPC and
// report "RPCs still running at the deadline; stopped them".
func TestDrainWaitsForTheWorkRPCNotForAHealthWatch(t *testing.T) {
	g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}} // FullDuplexCall is a Checkpoint
	s := serve(t, g, "tcp")
	budget, err := deadline.New(60*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{Step("grpc", s.srv, g, 20*time.Second)}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a Recv that never comes fails, not hangs
	defer cancel()

	watch, err := s.hc.Watch(ctx, &healthpb.HealthCheckRequest{}) // a plain stream, kept open
	require.NoError(t, err)
	r, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus())
	work, err := openStream(t, ctx, s.worker)
	require.NoError(t, err, "the work RPC runs")

	reports := make(chan *drain.Report, 1)
	go func() { reports <- d.Shutdown(context.Background()) }()
	r, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus(), "the gate closed")
	_, err = watch.Recv()
	requireStopping(t, err)

	select {
	case rep := <-reports:
		t.Fatalf("the drain ended while a work RPC ran: %+v", rep.Phase("grpc"))
	default: // GracefulStop waits for the work RPC
	}
	require.NoError(t, work.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = work.Recv()
	require.NoError(t, err, "the work RPC still runs")
	require.NoError(t, work.CloseSend())
	_, err = work.Recv()
	require.ErrorIs(t, err, io.EOF, "the work RPC ended by itself, with OK")

	rep := <-reports
	step := rep.Phase("grpc")
	require.NotNil(t, step)
	assert.Equal(t, drain.OK, step.Result, step.Error)
	assert.Empty(t, step.Error)
}

// Stop on a server whose gate is still open (a server stopped outside a
// drain): a Watch that says SERVING is told NOT_SERVING, then ends, and Stop
// returns without its deadline.
func TestStopEndsAHealthWatchWithAFinalNotServing(t *testing.T) {
	g := &drain.Gate{}
	s := serve(t, g, "unix")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // bounds a failure
	defer cancel()
	watch, err := s.hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	r, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus())

	stopped := make(chan error, 1)
	go func() { stopped <- Stop(ctx, s.srv, g) }()
	r, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus(), "the final status")
	_, err = watch.Recv()
	requireStopping(t, err)
	require.NoError(t, <-stopped, "GracefulStop returned: nothing was cut")
	assert.False(t, g.Closed(), "Stop leaves the gate to the drain")
}

// fakeServer stands in for a *grpc.Server in virtual time: GracefulStop
// waits for every RPC's handler, Stop cancels their context.
type fakeServer struct {
	ctx    context.Context
	cancel context.CancelFunc
	rpcs   sync.WaitGroup
}

func newFakeServer() *fakeServer {
	s := &fakeServer{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

func (s *fakeServer) GracefulStop() { s.rpcs.Wait() }
func (s *fakeServer) Stop()         { s.cancel() }

// work runs a work RPC through the interceptor that takes d, or until the
// server's Stop.
func (s *fakeServer) work(g *drain.Gate, d time.Duration) {
	intercept := StreamServerInterceptor(g, Methods(nil, drain.Checkpoint))
	s.rpcs.Go(func() {
		_ = intercept(nil, &fakeStream{ctx: s.ctx}, &grpc.StreamServerInfo{FullMethod: "/worker.Worker/Checkpoint"},
			func(_ any, ss grpc.ServerStream) error {
				select {
				case <-time.After(d):
					return nil
				case <-ss.Context().Done():
					return ss.Context().Err()
				}
			})
	})
}

// watch runs a health Watch through the interceptor and the real health
// server; its status arrives on the returned channel when it ends.
func (s *fakeServer) watch(g *drain.Gate, hs *health.Server) (*fakeStream, <-chan error) {
	intercept := StreamServerInterceptor(g, Methods(nil, drain.Create))
	desc := healthpb.Health_ServiceDesc.Streams[0]
	ctx, cancel := context.WithCancel(s.ctx)
	st := &fakeStream{ctx: ctx, cancel: cancel}
	ended := make(chan error, 1)
	s.rpcs.Go(func() {
		ended <- intercept(hs, st, &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/" + desc.StreamName, IsServerStream: true}, desc.Handler)
	})
	return st, ended
}

// fakeStream is a server stream that records the health statuses sent.
type fakeStream struct {
	ctx    context.Context
	cancel context.CancelFunc // the client's cancel, for a Watch
	mu     sync.Mutex
	sent   []healthpb.HealthCheckResponse_ServingStatus
}

func (s *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)       {}
func (s *fakeStream) Context() context.Context     { return s.ctx }
func (s *fakeStream) RecvMsg(any) error            { return nil } // the empty request: the server's own health
func (s *fakeStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, m.(*healthpb.HealthCheckResponse).GetStatus())
	return nil
}

func (s *fakeStream) statuses() []healthpb.HealthCheckResponse_ServingStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]healthpb.HealthCheckResponse_ServingStatus(nil), s.sent...)
}

// Stop returns when the work RPC ends (at 2 s), not at its deadline (5 s):
// the Watch open since before the drain ends as Stop begins; one opened
// while Stop runs ends at once, never saying SERVING; one opened after Stop
// returned is left open.
func TestStopWaitsForWorkNotForHealthWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{}
		hs := health.NewServer()
		srv := newFakeServer()
		defer srv.cancel()
		start := time.Now()

		first, firstEnded := srv.watch(g, hs)
		srv.work(g, 2*time.Second)
		synctest.Wait()
		require.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING}, first.statuses())
		g.Close()
		synctest.Wait()
		require.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING},
			first.statuses(), "the gate closed")

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stopped := make(chan error, 1)
		go func() { stopped <- Stop(ctx, srv, g) }()
		synctest.Wait()
		select {
		case err := <-firstEnded:
			requireStopping(t, err)
		default:
			t.Fatal("the Watch open before Stop did not end as Stop began")
		}
		assert.Len(t, first.statuses(), 2, "nothing after the final NOT_SERVING")

		time.Sleep(time.Second)
		second, secondEnded := srv.watch(g, hs)
		synctest.Wait()
		select {
		case err := <-secondEnded:
			requireStopping(t, err)
		default:
			t.Fatal("a Watch opened while Stop ran did not end at once")
		}
		assert.NotContains(t, second.statuses(), healthpb.HealthCheckResponse_SERVING)

		require.NoError(t, <-stopped, "the work RPC ended before the deadline")
		assert.Equal(t, 2*time.Second, time.Since(start), "Stop returned with the work RPC")

		third, thirdEnded := srv.watch(g, hs)
		synctest.Wait()
		assert.Equal(t, []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING}, third.statuses(),
			"after Stop, a Watch is left open, still draining")
		require.Empty(t, thirdEnded)
		third.cancel()
		assert.Equal(t, codes.Canceled, status.Code(<-thirdEnded), "the client's end, not Stop's")
	})
}
