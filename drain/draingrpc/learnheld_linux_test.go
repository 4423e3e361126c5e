package draingrpc

import (
	"testing"

	"github.com/stretchr/testify/assert"
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

	awaitLearningEnd(t, "its RPC answered")
	require.NotNil(t, serverKey(), "the key found in drainkit's RPC, answered while its End is held")
}

// Fault: a learning of grpc's key that a process-wide stats handler held
// before its RPC was answered (a tracer's synchronous export as the RPC
// begins, to a collector that does not answer) never ended, so it never
// said it in the log (row 3443 says a failed one as it ends): a held Stop
// told its RPCs from other servers' by the socket tables meanwhile, and
// only its Step's detail, in the Report, said so; the logs said nothing,
// not at that Stop nor after.
//
//	every server           a stats handler that holds drainkit's RPC as it begins
//	busy (tcp)             a stream runs (the first RPC: starts the learning, held)
//	quiet (tcp)            no RPC, a connection in its handshake
//	Stop(quiet), twice     held: the socket tables tell busy's stream another server's
//	the log                before, no WARN; after, one, at the first: the learning held, what it costs, what to do
//
// It runs in a process of its own: the key is learned once per process,
// and the option and the default logger are the process's.
func TestALearningHeldAtAHeldStopIsSaidOnceInTheLog(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	logs := logToDefault(t)
	collector := newHoldFirstProbe()
	withGlobalServerOptions(t, grpc.StatsHandler(collector))
	t.Cleanup(func() { close(collector.release) })
	g := &drain.Gate{}
	busy := serve(t, g, "tcp")
	_, err := openStream(t, t.Context(), busy.worker)
	require.NoError(t, err, "busy's stream: the first RPC, starts the learning")
	collector.awaitBegun(t)

	for range 2 {
		quiet := quietAndHeld(t, g)
		require.NoError(t, stopOnceClosed(t, quiet, g, func() {}), "busy's stream listens on: not quiet's")
	}
	require.Nil(t, serverKey(), "the learning still held")
	warned := linesWith(logs.String(), "level=WARN")
	require.Len(t, warned, 1, "said once, at the first held Stop the socket tables told:\n%s", logs.String())
	assert.Contains(t, warned[0], "socket tables")
	assert.Contains(t, warned[0], "stats handler")
	assert.Contains(t, warned[0], "grpc.ConnectionTimeout")
}
