package draingrpc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

// Fault: the learner's RPC had no bound: a process-wide stats handler
// that held drainkit's RPC before its answer (a tracer's synchronous
// export as the RPC begins, to a collector that does not answer) held the
// learning for the process's life, and with it its loopback connection,
// its grpc.Server and their goroutines; row 3682's WARN said it was still
// running, never that it ended.
//
//	every server           a stats handler that holds drainkit's RPC as it begins, until the collector answers
//	learning the key       its RPC held: before, still running 10 s past its bound (1 s here);
//	                       after, ends at it, not learned, "not answered within 1s"
//	then                   nothing of the learning's runs but the handler's goroutine that holds
//	                       its RPC: its connection closed, its server stopped
//	the collector answers  nothing left at all
//
// It runs in a process of its own: the option is the process's.
func TestALearningHeldBeforeItsAnswerEndsAtItsBound(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	collector := newHoldFirstProbe()
	withGlobalServerOptions(t, grpc.StatsHandler(collector))
	running := goleak.IgnoreCurrent()

	const bound = time.Second
	type learned struct {
		key any
		why string
	}
	ended := make(chan learned, 1)
	go func() {
		key, why := learnServerKey(origin{authority: "localhost"}, bound)
		ended <- learned{key, why}
	}()
	collector.awaitBegun(t)
	select {
	case l := <-ended:
		require.Nil(t, l.key, "a key learned from an RPC never answered")
		require.Contains(t, l.why, "not answered within 1s")
	case <-time.After(bound + 10*time.Second): // a hang guard past the bound
		t.Fatal("the learning still runs, 10 s past its bound, its RPC held")
	}
	goleak.VerifyNone(t, running, goleak.IgnoreAnyFunction("github.com/drainkit/drainkit/drain/draingrpc.holdFirstProbe.TagRPC"))

	close(collector.release)
	goleak.VerifyNone(t, running)
}
