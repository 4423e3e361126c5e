package draingrpc_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/drain/draingrpc"
	"github.com/drainkit/drainkit/pause"
)

// A gRPC worker in the ateom shape: Run is gated, Checkpoint stays open
// while draining, and the server stops within its own step's reserve.
func Example() {
	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	classify := draingrpc.Methods(map[string]drain.Class{
		healthpb.Health_Check_FullMethodName: drain.Create, // stands in for Run
	}, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(draingrpc.UnaryServerInterceptor(gate, classify)),
		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(ln) }()

	budget, _ := deadline.New(3600 * time.Second)
	d, err := drain.New(drain.Config{
		Budget:    budget,
		Gate:      gate,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{draingrpc.Step("grpc", srv, 5*time.Second)},
	})
	if err != nil {
		panic(err)
	}

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("before SIGTERM:", status.Code(err))

	gate.Close() // what the preStop handler or Shutdown does first
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("while draining:", status.Code(err))

	rep := d.Shutdown(context.Background()) // in main: d.HandleSignals(ctx)
	fmt.Println("grpc step:", rep.Phase("grpc").Result)
	// Output:
	// before SIGTERM: OK
	// while draining: Unavailable
	// grpc step: ok
}
