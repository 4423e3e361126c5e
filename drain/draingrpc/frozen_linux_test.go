package draingrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/proc/proctest"
)

// frozenStopChild names, in the environment of this test binary run
// again, the step it runs: one whose process the test freezes while
// grpc's Stop returns, inside the wait (stopReturn) Stop gives it.
const frozenStopChild = "DRAINKIT_GRPC_FROZEN_STOP_CHILD"

// handlerWrapUp is how long the child's handler takes to return once its
// process runs again, the process frozen as grpc's Stop cancelled the
// handler's context: inside stopReturn (50 ms), for grpc's Stop, which
// waits for it (grpc.WaitForHandlers(true)).
const handlerWrapUp = 15 * time.Millisecond

// Fault: Stop waited stopReturn for grpc's Stop after the step's deadline
// in wall time: a process frozen inside that wait (a container at its
// CPU quota, a loaded node) while grpc's Stop returned ran again with the
// wait's end and Stop's return both due, and the wait could end first:
// the step's detail said grpc's Stop "did not return after the deadline,
// left running", blaming a connection in its handshake, where it had
// returned in time, and Stop counted the RPCs as a held Stop does. The
// wait now counts only the time Stop, awake, saw pass on time
// (bounded.Within). The child freezes itself (SIGSTOP) as its
// handler's context is cancelled, so the freeze falls inside the wait
// however loaded the machine.
//
//	0        the child's step runs: GracefulStop waits for one RPC
//	1 s      the deadline: grpc's Stop cancels the RPC and waits for its handler,
//	         which freezes its process (SIGSTOP)
//	+300 ms  the test lets it run (SIGCONT): the handler returns 15 ms later, and grpc's Stop;
//	         the step's detail says nothing held
func TestAStopReturningAsItsProcessIsFrozenIsNotHeld(t *testing.T) {
	if os.Getenv(frozenStopChild) != "" {
		runFrozenStopChild(t)
		return
	}
	child := proctest.Again(t, frozenStopChild)
	child.HoldStops(t, 1, 300*time.Millisecond)
	var res struct{ Detail, Err string }
	child.Decode(t, map[string]any{"step": &res})
	assert.NotContains(t, res.Detail, heldStop, "grpc's Stop returned %v after the process ran again", handlerWrapUp)
	assert.Contains(t, res.Err, "RPCs still running at the deadline", "Stop cut the RPC")
}

func runFrozenStopChild(t *testing.T) {
	g := &drain.Gate{}
	classify := Methods(map[string]drain.Class{testgrpc.TestService_UnaryCall_FullMethodName: drain.Create}, drain.Create)
	srv := grpc.NewServer(grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)))
	running := make(chan struct{})
	testgrpc.RegisterTestServiceServer(srv, wrapsUpWorker{running: running})
	ln, err := net.Listen("unix", t.TempDir()+"/grpc.sock")
	require.NoError(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient("unix://"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	called := make(chan struct{})
	go func() {
		defer close(called)
		_, _ = testgrpc.NewTestServiceClient(conn).UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	}()
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	detail, err := Step("grpc", srv, g, 0).Run(ctx)
	res := struct{ Detail, Err string }{Detail: fmt.Sprint(detail)}
	if err != nil {
		res.Err = err.Error()
	}
	j, jerr := json.Marshal(res)
	require.NoError(t, jerr)
	fmt.Printf("step %s\n", j)
	<-called
	require.NoError(t, conn.Close())
	<-served
}

// wrapsUpWorker's UnaryCall says it runs; as its context is cancelled it
// freezes its process (proctest.FreezeSelf: at this point of its run,
// where a kill(2) of the process let it run on for tens of ms under
// load), and returns handlerWrapUp after the process runs again, as a
// handler that finishes a write.
type wrapsUpWorker struct {
	testgrpc.UnimplementedTestServiceServer
	running chan struct{}
}

func (w wrapsUpWorker) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	close(w.running)
	<-ctx.Done()
	if err := proctest.FreezeSelf(); err != nil {
		return nil, err
	}
	time.Sleep(handlerWrapUp)
	return nil, ctx.Err()
}
