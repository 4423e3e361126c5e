package draingrpc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/drainkit/drainkit/drain"
)

// Fault: the learner found grpc's key in its handler, before drainkit's
// RPC was answered, but said it only once its server's GracefulStop had
// returned, and GracefulStop waits for every RPC's stats to end: a
// process-wide stats handler whose End waits for a collector that does
// not answer (a tracer's synchronous export) held the key, found, from
// every held Stop, which told its RPCs by the socket tables instead (row
// 2580's weaker sign), for as long as the collector did not answer.
//
//	every server           a stats handler whose End waits for the collector
//	a (tcp)                the user's first RPC, answered (its End held): starts the learning
//	drainkit's RPC         answered, its End held: before, no key 10 s on; after, the key learned
//	the collector          answers only once the test ends
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestTheKeyIsLearnedWhileAStatsHandlerHoldsTheEndOfTheLearnersRPC(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	collector := make(chan struct{})
	withGlobalServerOptions(t, grpc.StatsHandler(holdEnds{until: collector}))
	a := serve(t, &drain.Gate{}, "tcp")
	t.Cleanup(func() { close(collector) }) // before a's own cleanup, whose RPC's End it holds
	_, err := a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
	require.NoError(t, err, "the user's first RPC, answered before its End: starts the learning")

	select {
	case <-keyLearning.done:
	case <-time.After(10 * time.Second): // a hang guard: the learning takes a millisecond
		t.Fatal("the learning still runs, 10 s on, its RPC answered")
	}
	require.NotNil(t, serverKey(), "the key found in drainkit's RPC, answered while its End is held")
}
