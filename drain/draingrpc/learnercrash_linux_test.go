package draingrpc

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/drainkit/drainkit/drain"
)

// Fault: drainkit's own RPC, the one that learns grpc's key (row 2660,
// served in process through ServeHTTP), had no local address, an empty
// peer address and no :authority, where grpc gives every RPC it serves all
// three (its transport takes the two addresses from the connection and
// refuses a request with no :authority, as net/http's HTTP/2 server does
// under ServeHTTP). A process-wide stats handler that labels each RPC with
// them, as grpc gives them, served every RPC of the program and panicked
// on drainkit's alone, on grpc's goroutine, where nothing recovers: the
// process ended as the key was learned.
//
//	every server           a stats handler labels each RPC: client, listener, authority
//	a (tcp, 127.0.0.1:P)   the user's RPC, labelled (the first: learns the key): before, the
//	                       process ends (not an ip:port); after, learned
//	                       a stream runs, a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on 127.0.0.1:P
//	the deadline           a's stream counts as cut
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestTheLearnersRPCCarriesTheAddressesAndAuthorityOfEveryRPC(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.StatsHandler(labelEachRPC{}))
	g := &drain.Gate{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
	_, err = a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
	require.NoError(t, err, "the user's own RPC, labelled")
	holdWithItsOwnStream(t, a)

	err = stopOnceClosed(t, a, g, func() { listenInAnotherProcess(t, a.addr) })
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop, told by the key learned")
}

// labelEachRPC is a stats handler that labels each RPC with its client's
// address, the listener's it came in on and the authority it asked for,
// read as grpc gives them for every RPC it serves: it trusts them there.
type labelEachRPC struct{ ignoreStats }

type rpcLabelKey struct{}

func (labelEachRPC) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	p, _ := peer.FromContext(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	label := netip.MustParseAddrPort(p.Addr.String()).Addr().String() + " " + p.LocalAddr.String() + " " + md.Get(":authority")[0]
	return context.WithValue(ctx, rpcLabelKey{}, label)
}

// Fault: a process-wide stats handler that panicked on the connection of
// drainkit's own RPC ended the process there, on the learning's goroutine,
// where grpc calls a connection's TagConn and HandleConn under ServeHTTP,
// with nothing to recover it. A connection grpc accepts on a TCP listener
// has a *net.TCPAddr for its client; the one of a request served through
// ServeHTTP has grpc's own string type, which a handler that asserts the
// first (a server listening on TCP alone, labelling its connections by
// their client's IP) did not expect. Row 3441 recovered the panic, and
// the learning ended without the key; since row 3560 drainkit's connection
// gives the addresses of the user's RPC that started the learning, which
// the handler labelled already, and the key is learned.
//
//	every server           a stats handler labels each connection by its client's *net.TCPAddr
//	a (tcp)                the user's RPC, on a labelled connection
//	learning the key       its connection, labelled: before, the process ends;
//	                       after, the key is learned, the process running on
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestALabelOfTheLearnersConnectionEndsNotTheProcess(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.StatsHandler(labelEachConn{}))
	a := serve(t, &drain.Gate{}, "tcp")
	_, err := a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
	require.NoError(t, err, "the user's own RPC, on a labelled connection (the first: starts the learning)")

	awaitLearningEnd(t)
	require.NotNil(t, serverKey(), "the key learned on a connection labelled as the user's, the process running on")
}

// labelEachConn is a stats handler that labels each connection with its
// client's IP, from the *net.TCPAddr a TCP listener's connections have.
type labelEachConn struct{ ignoreStats }

type connLabelKey struct{}

func (labelEachConn) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connLabelKey{}, info.RemoteAddr.(*net.TCPAddr).IP.String())
}

// Fault: the first Stop of a *grpc.Server in a process started the RPC
// that learns grpc's key, whether or not any RPC had run: a process-wide
// stats handler that panics on every RPC (on grpc's goroutine, where
// nothing recovers it) ended a server that had served none yet at its
// drain, on drainkit's RPC, where it had crashed on no RPC of its own. The
// key is needed only to tell apart RPCs that g's interceptors admitted,
// each of which ran the process-wide handlers before it reached them, so
// the learning now waits for the first of those.
//
//	every server           a stats handler that panics on every RPC
//	a (tcp)                serves no RPC
//	Stop(a), 1 min         before: the process ends on drainkit's RPC;
//	                       after: GracefulStop returns, and so does Stop
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestStopOfAServerThatServedNoRPCRunsNoRPCOfItsOwn(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.StatsHandler(panicOnEveryRPC{}))
	g := &drain.Gate{}
	a := serve(t, g, "tcp")

	returnsWithGracefulStop(t, a, g, "the Stop of a server that served no RPC")
}

// panicOnEveryRPC is a stats handler that panics on every RPC: one that
// ends the process at the first RPC any server of it serves.
type panicOnEveryRPC struct{ ignoreStats }

func (panicOnEveryRPC) TagRPC(context.Context, *stats.RPCTagInfo) context.Context {
	panic("a stats handler that panics on every RPC")
}

// Fault: drainkit's own RPC, the one that learns grpc's key (row 2660),
// was served through ServeHTTP, where grpc gives the client's address its
// own string type, not the *net.TCPAddr of every RPC a TCP listener's
// connection brings. A process-wide stats handler that reads it as its
// server's RPCs have it, in an RPC's TagRPC (where grpc's and
// OpenTelemetry's label each RPC), served every RPC of the program and
// panicked on drainkit's alone, on grpc's goroutine, where nothing
// recovers (row 3441 recovered TagConn's alone): since the learning starts
// at the first RPC (row 3442), the process ended at the user's first RPC.
//
//	every server           a stats handler labels each RPC by its client's *net.TCPAddr
//	a (tcp)                the user's RPC, labelled (the first: learns the key)
//	learning the key       drainkit's RPC, labelled: before, the process ends;
//	                       after, it comes as the user's did, and the key is learned
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestTheLearnersRPCComesWithTheAddressesOfTheRPCThatStartedIt(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	withGlobalServerOptions(t, grpc.StatsHandler(labelEachRPCByIP{}))
	a := serve(t, &drain.Gate{}, "tcp")
	_, err := a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
	require.NoError(t, err, "the user's own RPC, labelled by its client's IP (the first: starts the learning)")

	awaitLearningEnd(t)
	require.NotNil(t, serverKey(), "the key learned from drainkit's RPC, labelled as the user's was")
}

// labelEachRPCByIP is a stats handler that labels each RPC with its
// client's IP, from the *net.TCPAddr of a TCP listener's connections.
type labelEachRPCByIP struct{ ignoreStats }

func (labelEachRPCByIP) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	p, _ := peer.FromContext(ctx)
	return context.WithValue(ctx, rpcLabelKey{}, p.Addr.(*net.TCPAddr).IP.String())
}
