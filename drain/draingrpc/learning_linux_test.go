package draingrpc

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/drainkit/drainkit/drain"
)

// Fault: the first Stop in a process started learning grpc's key (row
// 3162) and then waited for it until its deadline before it looked at
// GracefulStop at all, and so did every Stop after it while the learning
// was held (a process-wide stats handler whose End waits for a collector
// that does not answer): a server with no RPC, whose GracefulStop returned
// at once, was held to the step's deadline, and the pod with it, where
// the key is read only by a Stop held past its deadline. Since row 3681
// a held End no longer holds the learning, its RPC answered; one held as
// it begins does.
//
//	every server           a stats handler that holds drainkit's RPC as it begins, until the collector answers
//	the process            its first RPC (another server's) starts learning the key: its RPC held
//	a, b (tcp)             no RPC
//	Stop(a), 1 min         GracefulStop returns: so does Stop
//	Stop(b), 1 min         the learning still held: Stop returns with GracefulStop
//	the collector          answers only once both returned
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestStopOfAnIdleServerReturnsWithGracefulStopWhileLearningTheKeyIsHeld(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	collector := newHoldFirstProbe()
	withGlobalServerOptions(t, grpc.StatsHandler(collector))
	g := &drain.Gate{}
	a := serve(t, g, "tcp")
	b := serve(t, g, "tcp")
	t.Cleanup(func() { close(collector.release) })
	startLearning(t.Context()) // as the process's first RPC through draingrpc's interceptors does
	collector.awaitBegun(t)    // the learning is held before either Stop runs

	returnsWithGracefulStop(t, a, g, "the first Stop, while the learning is held")
	returnsWithGracefulStop(t, b, g, "a Stop of another server while the learning is held")
}

// returnsWithGracefulStop runs Stop on s, idle, with a minute to its
// deadline, and requires it to return nil long before.
func returnsWithGracefulStop(t *testing.T, s *server, g *drain.Gate, which string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- Stop(ctx, s.srv, g) }()
	select {
	case err := <-stopped:
		require.NoError(t, err, which)
	case <-time.After(10 * time.Second): // a hang guard: GracefulStop of an idle server returns in milliseconds
		t.Fatalf("%s still waits, 10 s on, for the RPC that learns grpc's key, where GracefulStop returned", which)
	}
}

// awaitLearningEnd waits until the learning of grpc's key ended, the key
// learned or not. The learning takes a millisecond: 10 s on, it fails t,
// saying what else held then, if anything.
func awaitLearningEnd(t *testing.T, held ...string) {
	t.Helper()
	select {
	case <-keyLearning.done:
	case <-time.After(10 * time.Second): // a hang guard: the learning takes a millisecond
		t.Fatal(strings.Join(append([]string{"the learning still runs, 10 s on"}, held...), ", "))
	}
}

// Fault: the first Stop in a process made the channel that says grpc's
// key is learned (row 3162), and when that Stop ran in a testing/synctest
// bubble (a test of a server's drain, timed as drainkit's own are) the
// channel was the bubble's: the next Stop held past its deadline read it
// from outside that bubble (another test, or a later bubble), and the
// runtime ended the whole test binary, "fatal error: receive on synctest
// channel from outside bubble".
//
//	a bubble               the process's first RPC through an interceptor: starts learning the key;
//	                       Stop of a server never served
//	a (tcp), outside it    a stream runs, a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on a's address
//	the deadline           a's stream counts as cut, by the key learned in the bubble
//
// It runs in a process of its own: the key is learned once per process.
func TestAHeldStopAfterTheFirstStopRanInASynctestBubble(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	synctest.Test(t, func(t *testing.T) {
		admitOneRPC(t)
		require.NoError(t, Stop(t.Context(), grpc.NewServer(), nil), "a test's server, never served")
	})

	err := heldStopOfItsOwnStream(t)
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop, told by grpc's key")
}

// admitOneRPC runs a unary RPC through an interceptor of draingrpc's, as a
// test's server in a bubble serves its client's: the first in the process
// starts learning grpc's key.
func admitOneRPC(t *testing.T) {
	t.Helper()
	intercept := UnaryServerInterceptor(&drain.Gate{}, Methods(nil, drain.Create))
	info := &grpc.UnaryServerInfo{FullMethod: testgrpc.TestService_EmptyCall_FullMethodName}
	_, err := intercept(t.Context(), &testgrpc.Empty{}, info, func(context.Context, any) (any, error) { return &testgrpc.Empty{}, nil })
	require.NoError(t, err)
}

// ignoreStats is a stats handler that does nothing: a test's handler embeds
// it and writes only the methods it is about.
type ignoreStats struct{}

func (ignoreStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (ignoreStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (ignoreStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (ignoreStats) HandleConn(context.Context, stats.ConnStats)                       {}
