package draingrpc

import (
	"context"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// checkpointExport is a checkpoint that streams its image back: it works
// until release is closed, sends the image, 32 MiB in one message, and
// returns.
type checkpointExport struct {
	testgrpc.UnimplementedTestServiceServer
	release  chan struct{}
	returned chan time.Time
}

func (c checkpointExport) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	<-c.release
	err := s.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, 32<<20)}})
	c.returned <- time.Now()
	return err
}

// A client that stopped reading (a suspended process, a stalled proxy)
// leaves a response its handler queued in grpc's transport, held by
// HTTP/2's flow control, and GracefulStop waits for its connection: the
// grpc step now calls Stop its reserve after the last RPC's handler
// returned, cutting no handler, ok, its detail saying why. Fault: the step
// waited to its deadline, the budget's at the last step, the process and
// its pod held there whatever the work: measured on loopback with a 20 s
// grace, the step took 18 s for a handler that had returned before the
// drain (the HTTP step bounds the same by its reserve, rows 1351, 1490).
// In virtual time, a 60 s grace, the step's reserve 1 s:
//
//	0 s  SIGTERM: nothing to preserve; the grpc step: GracefulStop
//	     a checkpoint's handler runs: waited for
//	3 s  it sends its 32 MiB image, which its client does not read, and returns
//	4 s  the reserve after it: Stop; the step ok
func TestGRPCStepStopsItsReserveAfterTheLastRPCForAClientThatStoppedReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
		classify := Methods(map[string]drain.Class{testgrpc.TestService_StreamingOutputCall_FullMethodName: drain.Checkpoint}, drain.Create)
		srv := grpc.NewServer(grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, classify)),
			grpc.ChainStreamInterceptor(StreamServerInterceptor(g, classify)))
		checkpoint := checkpointExport{release: make(chan struct{}), returned: make(chan time.Time, 1)}
		testgrpc.RegisterTestServiceServer(srv, checkpoint)
		ln := pipenet.Listen("pipe")
		go func() { _ = srv.Serve(ln) }()
		defer srv.Stop()
		conn, err := grpc.NewClient("passthrough:///pipe",
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return ln.Dial(ctx, "tcp", addr) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err = testgrpc.NewTestServiceClient(conn).StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{}) // never read
		require.NoError(t, err)
		synctest.Wait() // the handler runs

		budget, err := deadline.New(time.Minute, deadline.Config{})
		require.NoError(t, err)
		d, err := drain.New(drain.Config{Budget: budget, Gate: g,
			Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
			Steps:     []drain.Step{Step("grpc", srv, g, time.Second)}})
		require.NoError(t, err)
		start := time.Now()
		time.AfterFunc(3*time.Second, func() { close(checkpoint.release) })
		rep := d.Shutdown(context.Background())

		assert.Equal(t, 3*time.Second, (<-checkpoint.returned).Sub(start), "the checkpoint's handler returned")
		p := rep.Phase("grpc")
		require.NotNil(t, p)
		assert.Equal(t, drain.OK, p.Result, p.Error)
		assert.Equal(t, 4*time.Second, p.End.Sub(start), "the step's reserve after the handler returned, not its deadline %v", p.Deadline.Sub(start))
		assert.Contains(t, p.Detail, "GracefulStop still waited 1s after the last RPC's handler returned (the step's reserve)")
		assert.NoError(t, rep.Err())
	})
}
