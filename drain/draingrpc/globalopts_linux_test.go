package draingrpc

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	_ "unsafe" // go:linkname, to grpc's process-wide server options

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
)

// addGlobalServerOptions is grpc-go's internal.AddGlobalServerOptions
// (a func(...grpc.ServerOption)): options every grpc.NewServer of the
// process applies before its own, drainkit's private one too. grpc's
// public ways to add them install grpc's own OpenTelemetry stats handlers
// and interceptors (stats/opentelemetry/csm's EnableObservability;
// gcp/observability's are a module of their own); a program's own (an
// authorization policy, its tracer) reaches the hook as this test does.
//
//go:linkname addGlobalServerOptions google.golang.org/grpc/internal.AddGlobalServerOptions
var addGlobalServerOptions any

// withGlobalServerOptions gives every grpc.NewServer of the process opts,
// for as long as the process runs, as a program gives its own once, before
// its servers: the learning of grpc's key, on a goroutine nothing joins,
// reads them in its grpc.NewServer whenever it runs, after t's end too, so
// they are never taken away (grpc's ClearGlobalServerOptions, an
// unsynchronized write). Only a test in a process of its own
// (inAProcessOfItsOwn) may give them.
func withGlobalServerOptions(t *testing.T, opts ...grpc.ServerOption) {
	t.Helper()
	require.NotEmpty(t, os.Getenv(ownProcessEnv), "process-wide options, kept for the process's life, in a process that runs other tests")
	add, ok := addGlobalServerOptions.(func(...grpc.ServerOption))
	require.True(t, ok, "grpc-go's internal.AddGlobalServerOptions is no longer a func(...grpc.ServerOption)")
	add(opts...)
}

// Fault: withGlobalServerOptions took the process-wide options away as its
// test ended (grpc's ClearGlobalServerOptions), where the learning of
// grpc's key that the test's first RPC started (startLearning), on a
// goroutine nothing joins, reads them in grpc.NewServer whenever it runs:
// a learner that ran late, past the test's last lock it shared (grpc's
// channelz), read them unordered with the clear, a data race under -race
// (TestStopOfAnIdleServerReturnsWithGracefulStopWhileLearningTheKeyIsHeld,
// 1 of 30 runs of the package), or after it, and learned under options the
// process no longer had. A program's process-wide options are its own for
// its life; a test's now are too.
//
//	every server           a stats handler that counts drainkit's RPC
//	a test                 starts learning the key, as its first RPC does, and ends
//	the learning           drainkit's RPC, under the stats handler: counted once
//
// It runs in a process of its own: the option is the process's.
func TestProcessWideOptionsOutliveTheTestWhoseRPCStartedTheLearning(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	var probes countProbes
	t.Run("its first RPC starts learning the key, and it ends", func(t *testing.T) {
		withGlobalServerOptions(t, grpc.StatsHandler(&probes))
		startLearning(t.Context()) // as its first RPC through draingrpc's interceptors does
	})
	select {
	case <-keyLearning.done:
	case <-time.After(10 * time.Second): // a hang guard: the learning takes a millisecond
		t.Fatal("the learning still runs, 10 s on")
	}
	require.NotNil(t, serverKey(), "grpc's key")
	require.Equal(t, int32(1), probes.n.Load(), "drainkit's RPC, run under the process's stats handler")
}

// countProbes is a stats handler that counts the RPCs of drainkit's own
// that learn grpc's key.
type countProbes struct{ n atomic.Int32 }

func (c *countProbes) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName == probeFullMethod {
		c.n.Add(1)
	}
	return ctx
}
func (*countProbes) HandleRPC(context.Context, stats.RPCStats) {}
func (*countProbes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (*countProbes) HandleConn(context.Context, stats.ConnStats) {}

// policy refuses, PermissionDenied, every RPC of a service it does not
// list, as an authorization policy denies by default: the program lists
// the services it serves, not drainkit's private one.
func policy(method string) error {
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch service {
	case "grpc.testing.TestService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection":
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "%s: not in the policy", method)
}

// policyInterceptors are the interceptors, unary and stream, that enforce
// policy.
func policyInterceptors() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := policy(info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := policy(info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// heldStopOfItsOwnStream is row 2580's case, on a server made after
// the process's global options: a's stream runs, a Stop of a is held in a
// handshake, and another process listens on a's address once a's listener
// closed; it returns what that Stop returned.
func heldStopOfItsOwnStream(t *testing.T) error {
	t.Helper()
	g := &drain.Gate{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
	holdWithItsOwnStream(t, a)
	return stopOnceClosed(t, a, g, func() { listenInAnotherProcess(t, a.addr) })
}

// Fault (row 3100): a process-wide server option (grpc's
// AddGlobalServerOptions, which its observability packages use) reached
// drainkit's private server too, the one that learns grpc's key to an
// RPC's server from an RPC of its own (row 2660): an authorization policy
// that refuses the services it does not list refused that RPC before its
// handler ran, so the key was never learned, every RPC's server was told
// by the socket tables, and row 2580's fault came back.
//
//	every server           the policy's interceptors, unary and stream
//	a (tcp, 127.0.0.1:P)   a stream runs (the first RPC: learns the key), a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on 127.0.0.1:P
//	the deadline           before: nil; after: a's stream counts as cut
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestAHeldStopCountsItsOwnRPCUnderAGlobalPolicyInterceptor(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, policyInterceptors()...)

	err := heldStopOfItsOwnStream(t)
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// Fault (row 3100): the same with a process-wide stats handler whose
// TagRPC gives each RPC a context of its own type (a tracer's, a
// logger's): it ran on drainkit's private server's RPC too, over grpc's
// context, where the learner's walk stopped, and the key was not learned.
//
//	every server           a stats handler: a taggedRPC over grpc's context
//	a (tcp, 127.0.0.1:P)   a stream runs (the first RPC: learns the key), a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on 127.0.0.1:P
//	the deadline           before: nil; after: a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCUnderAGlobalStatsHandlerOfItsOwnContext(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.StatsHandler(taggingStats{}))

	err := heldStopOfItsOwnStream(t)
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// Fault: the learner's walk read every field of an interface type of the
// contexts it met, a context's or not, to see whether it held a context,
// among them a cancelCtx's cause (an error, written under the context's
// lock by its cancel). A stats handler that ends each RPC with the
// application (its context cancelled with the application's, through
// context.AfterFunc, as a server ties its RPCs to its shutdown) had the
// walk read the cause of the RPC's context while the application's
// shutdown, on the SIGTERM Stop runs on, wrote it from another goroutine:
// a data race (go test -race failed), where the walk needs only the
// fields whose type is a context.
//
//	every server           a stats handler: each RPC's context ends with the application's
//	the application        shuts down: its context cancelled, each RPC's after it
//	learning the key       at the same time: reads no field the cancel writes
//
// It runs in a process of its own: the option is the process's.
func TestLearningTheKeyReadsNoFieldOfAContextCancelledMeanwhile(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	app, shutdown := context.WithCancel(context.Background())
	withGlobalServerOptions(t, grpc.StatsHandler(endWithTheApp{app: app}))

	shutDown := make(chan struct{})
	go func() {
		defer close(shutDown)
		shutdown()
	}()
	key, why := learnServerKey(originOf(t.Context()), learningBound)
	require.NotNil(t, key, "grpc's key, learned under the stats handler: %s", why)
	<-shutDown
}

// endWithTheApp is a stats handler that gives each RPC a context cancelled
// when the application's is.
type endWithTheApp struct{ app context.Context }

func (s endWithTheApp) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(s.app, cancel)
	return ctx
}
func (endWithTheApp) HandleRPC(context.Context, stats.RPCStats) {}
func (endWithTheApp) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (endWithTheApp) HandleConn(context.Context, stats.ConnStats) {}

// Fault: the first Stop of a *grpc.Server in a process learned grpc's key
// (an RPC of drainkit's own, served in process) before anything else and
// waited for it without bound: a process-wide stats handler that holds an
// RPC's end (a tracer exporting its span synchronously to a collector
// that no longer answers, its pod gone with the node's drain) held that
// RPC too, and Stop returned only when it did, past its deadline. Since
// row 3681 a held End no longer holds the learning, its RPC answered; one
// held as it begins does.
//
//	every server           a stats handler that holds drainkit's RPC as it begins, until the collector answers
//	a (tcp)                a stream runs (the first RPC: starts learning the key, its RPC held)
//	Stop(a), 100 ms
//	the deadline           grpc's Stop cuts a's stream; Stop returns
//	the collector          answers only once Stop returned
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestStopReturnsByItsDeadlineWhileLearningTheKeyIsHeld(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	collector := newHoldFirstProbe()
	withGlobalServerOptions(t, grpc.StatsHandler(collector))
	g := &drain.Gate{}
	a := serve(t, g, "tcp")
	t.Cleanup(func() { close(collector.release) })
	_, err := openStream(t, t.Context(), a.worker)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = Stop(ctx, a.srv, g) // what it says of a's stream is row 2580's tests'
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second): // a hang guard: the collector answers only once Stop returned
		t.Fatal("Stop still waits, 10 s past its 100 ms deadline, for the RPC that learns grpc's key")
	}
}

// holdEnds is a stats handler whose End of an RPC waits until until is
// closed, as a tracer's synchronous export to a collector that does not
// answer does.
type holdEnds struct{ until chan struct{} }

func (holdEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h holdEnds) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		<-h.until
	}
}
func (holdEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (holdEnds) HandleConn(context.Context, stats.ConnStats)                       {}
