package draingrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/drain/draingrpc"
	"github.com/drainkit/drainkit/pause"
)

// worker stands in for a sandbox service: its EmptyCall is "Run".
type worker struct {
	testgrpc.UnimplementedTestServiceServer
}

func (worker) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// A gRPC worker in the ateom shape: Run is gated, Checkpoint stays open
// while draining, the standard health service turns NOT_SERVING when the
// node drains (and is never gated itself), and the server stops within its
// own step's reserve.
func Example() {
	budget, _ := deadline.New(3600*time.Second, deadline.Config{})
	lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })

	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	classify := draingrpc.Methods(map[string]drain.Class{
		"/worker.Worker/Run":        drain.Create,
		"/worker.Worker/Restore":    drain.Resume,
		"/worker.Worker/Checkpoint": drain.Checkpoint,
	}, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(draingrpc.UnaryServerInterceptor(gate, classify)),
		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)),
	)
	d, err := drain.New(drain.Config{Budget: budget, Gate: gate, Sandboxes: lister,
		Steps: []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}})
	if err != nil {
		panic(err)
	}

	testgrpc.RegisterTestServiceServer(srv, worker{}) // EmptyCall: drain.Create, the default class
	healthpb.RegisterHealthServer(srv, health.NewServer())
	// In main, the signals before serving: signal.Notify(sigs, syscall.SIGTERM, os.Interrupt).
	sigs := make(chan os.Signal, 4)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(ln) }()

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	run := testgrpc.NewTestServiceClient(conn)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	_, err = run.EmptyCall(ctx, &testgrpc.Empty{})
	h, _ := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println("before SIGTERM: Run", status.Code(err), "/ health", h.GetStatus())

	gate.Close() // what the preStop handler or Shutdown does first
	_, err = run.EmptyCall(ctx, &testgrpc.Empty{})
	h, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println("while draining: Run", status.Code(err), "/ health", h.GetStatus())

	sigs <- syscall.SIGTERM // the kubelet's
	rep := d.ServeSignals(ctx, sigs)
	fmt.Println("grpc step:", rep.Phase("grpc").Result)
	// Output:
	// before SIGTERM: Run OK / health SERVING
	// while draining: Run Unavailable / health NOT_SERVING
	// grpc step: ok
}

// Serving that stops on its own (the listener's Accept failing for good)
// must not go unseen: grpc's Serve returns an error then, and nil only once
// the grpc step's GracefulStop or Stop was called. Log it and drain at
// once, by ending the ctx ServeSignals waits on (the node's sandboxes are
// out of every client's reach, and preserved while the process still holds
// them), then exit 1.
func Example_servingStopsOnItsOwn() {
	logger := slog.New(slog.DiscardHandler)
	budget, _ := deadline.New(30*time.Second, deadline.Config{})
	gate := &drain.Gate{Exempt: []drain.Class{drain.Pause, drain.Checkpoint, drain.Delete, drain.Stream, drain.KeepAlive}}
	classify := draingrpc.Methods(nil, drain.Create)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(draingrpc.UnaryServerInterceptor(gate, classify)),
		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)),
	)
	d, err := drain.New(drain.Config{Budget: budget, Gate: gate,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}})
	if err != nil {
		panic(err)
	}
	sigs := make(chan os.Signal, 4) // signal.Notify(sigs, syscall.SIGTERM, os.Interrupt), before serving
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx := context.Background()

	ctx, drainNow := context.WithCancelCause(ctx) // ServeSignals starts the drain when it ends
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(ln) // nil once the grpc step's GracefulStop or Stop was called
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil // the step stopped it before Serve began (a SIGTERM during the start)
		}
		served <- err // before the drain it begins, so that the drain's end finds it
		if err != nil {
			logger.Error("serving gRPC stopped on its own: draining now", "error", err)
			drainNow(fmt.Errorf("serving gRPC stopped: %w", err)) // the Report's Cause
		}
	}()
	ln.Close() // here, the failure: Accept fails for good
	rep := d.ServeSignals(ctx, sigs)
	var stopped error
	select {
	case stopped = <-served:
	default: // grpc's Stop left running by the step (a connection in its handshake) holds Serve
	}
	code := 0
	if rep.Err() != nil || stopped != nil {
		code = 1
	}
	fmt.Println("drained:", rep.Phase("grpc").Result, "/ exit", code) // os.Exit(code)
	fmt.Println("cause:", strings.SplitN(rep.Cause, ":", 2)[0])
	// Output:
	// drained: ok / exit 1
	// cause: serving gRPC stopped
}

// A gRPC server driven by the manifest of the one-call path: ConfigFromEnv
// reads DRAINKIT_GRACE and the other variables as NewServer does, and the
// server adds its Sandboxes, Gate and Steps.
func Example_configFromEnv() {
	for k, v := range map[string]string{drain.EnvGrace: "3600", drain.EnvPreserveEstimate: "4s", drain.EnvPodName: ""} {
		defer os.Setenv(k, os.Getenv(k)) // an example's process is shared with the tests
		os.Setenv(k, v)                  // as the pod's manifest sets them
	}
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.DiscardHandler)) // ConfigFromEnv logs that POD_NAME is unset
	lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })
	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	srv := grpc.NewServer()

	cfg, err := drain.ConfigFromEnv()
	if err != nil {
		log.Fatal(err) // names the variable that is wrong
	}
	cfg.Sandboxes, cfg.Gate = lister, gate
	cfg.Steps = []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}
	d, err := drain.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("grace", d.Budget().Grace(), "estimate", cfg.Pause.Estimator.Estimate(), "pod", cfg.Pod != nil)
	// Output: grace 1h0m0s estimate 4s pod false
}

// A server that clients reach through a Service's virtual IP: a refused
// RPC leaves its connection open (grpc-go lets no interceptor close one),
// and the client's retries would come back to the draining node until the
// grpc step. MaxConnectionAge's GOAWAY has each client connect again,
// through the Service, to a node still ready, and lets the RPCs admitted on
// the old connection (a checkpoint) run to their end: its
// MaxConnectionAgeGrace is left unset. (Compiled, not run: it serves until
// SIGTERM.)
func Example_behindAService() {
	budget, _ := deadline.New(3600*time.Second, deadline.Config{})
	lister := pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })
	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
	classify := draingrpc.Methods(map[string]drain.Class{"/worker.Worker/Checkpoint": drain.Checkpoint}, drain.Create)
	srv := grpc.NewServer(
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 30 * time.Second}), // behind a Service
		grpc.ChainUnaryInterceptor(draingrpc.UnaryServerInterceptor(gate, classify)),
		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)),
	)
	d, err := drain.New(drain.Config{Budget: budget, Gate: gate, Sandboxes: lister,
		Steps: []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}})
	if err != nil {
		log.Fatal(err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt) // before serving
	ln, err := net.Listen("tcp", ":9090")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }() // keep Serve's error: see Example_servingStopsOnItsOwn
	d.ServeSignals(context.Background(), sigs)
}
