package draingrpc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/listening/listeningtest"
)

// The tests here pin down which RPCs a held Stop counts as cut (row 2381:
// grpc's Stop not returned 50 ms after the deadline): its own server's,
// never another server's, wherever their sockets are. Each holds grpc's
// Stop in a connection's handshake and ends Stop's context once
// GracefulStop closed the server's listener:
//
//	Stop(a)        GracefulStop closes a's listener first of all
//	               (then, in some tests, another socket appears)
//	the deadline   grpc's Stop, held in the handshake
//	+50 ms         Stop returns: cut (ctx's error), or nil
//
// Stop tells an RPC's server by the *grpc.Server that grpc-go names in the
// RPC's context (serverOf), no longer by a socket listening on the address
// the RPC came in on (row 2381), which each fault below shows wrong: an
// address is not a server.

// unchanged is serveOn's wrap that leaves the listener as it is.
func unchanged(l net.Listener) net.Listener { return l }

// holdInHandshake opens a connection to s as its client does and sends
// part of the HTTP/2 preface, then nothing: grpc's Stop (and GracefulStop)
// wait for its handshake until grpc.ConnectionTimeout, so a Stop of s is
// held. The test's end closes it, which ends grpc's Stop.
func holdInHandshake(t *testing.T, s *server) {
	t.Helper()
	c, err := s.dial(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write([]byte("PRI * HTTP/2.0"))
	require.NoError(t, err)
	waitReading(t, s, c.LocalAddr())
}

// holdWithItsOwnStream opens a stream to s, which runs until its client
// closes it, and holds a Stop of s in a connection's handshake
// (holdInHandshake): a held Stop with an RPC of its own to count as cut.
func holdWithItsOwnStream(t *testing.T, s *server) {
	t.Helper()
	_, err := openStream(t, t.Context(), s.worker)
	require.NoError(t, err)
	holdInHandshake(t, s)
}

// quietAndHeld serves a server on tcp that runs no RPC, a Stop of which
// a connection in its handshake holds (holdInHandshake): one whose held
// Stop has no RPC of its own to count as cut.
func quietAndHeld(t *testing.T, g *drain.Gate) *server {
	t.Helper()
	quiet := serve(t, g, "tcp")
	holdInHandshake(t, quiet)
	return quiet
}

// stopOnceClosed runs Stop on s with g and ends its context once
// GracefulStop closed s's listener and meanwhile ran, and returns what
// Stop returned.
func stopOnceClosed(t *testing.T, s *server, g *drain.Gate, meanwhile func()) error {
	t.Helper()
	var err error
	runOnceClosed(t, s, meanwhile, func(ctx context.Context) { err = Stop(ctx, s.srv, g) })
	return err
}

// runOnceClosed runs stop, a Stop of s, and ends its context once
// GracefulStop closed s's listener and meanwhile ran; it returns once stop
// did.
func runOnceClosed(t *testing.T, s *server, meanwhile func(), stop func(context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		stop(ctx)
	}()
	select {
	case <-s.closed:
	case <-time.After(10 * time.Second): // a bound on the failure, not a timing assertion
		t.Fatal("GracefulStop never closed the server's listener")
	}
	meanwhile()
	cancel()
	<-stopped
}

// listenInAnotherProcess runs the test binary again as a process that
// listens on addr until the test ends (see listenEnv).
func listenInAnotherProcess(t *testing.T, addr net.Addr) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), listenEnv+"="+addr.Network()+" "+addr.String())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the other process did not listen: %s", &stderr)
	require.Equal(t, "listening\n", line)
}

// Fault (row 2580): a held Stop took its server's own stream for another
// server's when another process listened on the address the server had
// listened on (its successor, or a process given the port after it was
// freed) before the deadline: a socket listened there again, so the step
// reported nothing cut, and the stream its Stop cut went unreported.
//
//	a (tcp, 127.0.0.1:P)   a stream runs, a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on 127.0.0.1:P
//	the deadline           before: nil; after: a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCWhenAnotherProcessListensOnItsAddress(t *testing.T) {
	g := &drain.Gate{}
	a := serve(t, g, "tcp")
	holdWithItsOwnStream(t, a)

	err := stopOnceClosed(t, a, g, func() { listenInAnotherProcess(t, a.addr) })
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// taggedRPC is the context a user's stats handler or interceptor gives an
// RPC: a type of its own, which holds its parent in a field of its own and
// answers its key itself (no context.WithValue), as a tracer's or a
// logger's context may.
type taggedRPC struct {
	parent context.Context
	method string
}

type taggedRPCKey struct{}

func (c *taggedRPC) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *taggedRPC) Done() <-chan struct{}       { return c.parent.Done() }
func (c *taggedRPC) Err() error                  { return c.parent.Err() }
func (c *taggedRPC) Value(k any) any {
	if k == (taggedRPCKey{}) {
		return c.method
	}
	return c.parent.Value(k)
}

// taggingStats is a stats handler whose TagRPC gives each RPC a taggedRPC.
type taggingStats struct{ ignoreStats }

func (taggingStats) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return &taggedRPC{parent: ctx, method: info.FullMethodName}
}

// taggedStream is a ServerStream whose context is a taggedRPC.
type taggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s taggedStream) Context() context.Context { return s.ctx }

// tagStreams is a stream interceptor that hands its handler a taggedRPC.
func tagStreams(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, taggedStream{ss, &taggedRPC{parent: ss.Context(), method: info.FullMethod}})
}

// ownProcessEnv names the test that the test binary, run again, runs (see
// inAProcessOfItsOwn).
const ownProcessEnv = "DRAINKIT_TEST_OWN_PROCESS"

// inAProcessOfItsOwn reports whether t runs in a process of the test
// binary that runs t alone; where it does not, it runs t in one, and fails
// t when t failed there.
func inAProcessOfItsOwn(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) == t.Name() {
		return true
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ownProcessEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s in a process of its own:\n%s", t.Name(), out)
	return false
}

// Fault (row 2660): row 2580's fault came back when a stats handler (any
// grpc.StatsHandler's TagRPC runs before the interceptors) or an
// interceptor ahead of drainkit's gave the RPC a context of its own type:
// Stop found grpc's key to the RPC's server by walking the RPC's own chain
// of contexts, through the standard library's alone, so it found none
// there, for any RPC of that server, and fell back on the socket tables.
//
//	a (tcp, 127.0.0.1:P, a taggedRPC over grpc's context)
//	                       a stream runs, a connection in its handshake
//	Stop(a)                GracefulStop closes a's listener
//	another process        listens on 127.0.0.1:P
//	the deadline           before: nil; after: a's stream counts as cut
//
// It runs in a process of its own, as a server's process whose RPCs all
// have such a context: in this one, another test's RPC may have shown
// grpc's key already.
func TestAHeldStopCountsItsOwnRPCWhenItsContextIsOfTheUsersOwnType(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	for name, opt := range map[string]grpc.ServerOption{
		"a stats handler's":                     grpc.StatsHandler(taggingStats{}),
		"an interceptor's, ahead of drainkit's": grpc.ChainStreamInterceptor(tagStreams),
	} {
		t.Run(name, func(t *testing.T) {
			g := &drain.Gate{}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()), opt)
			holdWithItsOwnStream(t, a)

			err = stopOnceClosed(t, a, g, func() { listenInAnotherProcess(t, a.addr) })
			require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
		})
	}
}

// wrappedServer is a user's Server around a *grpc.Server (one that logs
// its stops, say): Stop cannot tell its RPCs by the *grpc.Server in their
// contexts.
type wrappedServer struct{ srv *grpc.Server }

func (w wrappedServer) GracefulStop() { w.srv.GracefulStop() }
func (w wrappedServer) Stop()         { w.srv.Stop() }

// Fault (row 2661): where a held Stop told the running RPCs from its own
// by the socket tables (their contexts named no *grpc.Server: s is not
// one, or a grpc-go that no longer names it), an address, which another
// process, socket or namespace may share (rows 2580 to 2585), the step's
// detail did not say so: a nil that rests on that read as one that rests
// on grpc's word.
//
//	busy (tcp)                 a stream runs on, its listener listening
//	quiet (tcp, wrapped)       no RPC, a connection in its handshake
//	Step(quiet)                the deadline: nil; before, the detail says
//	                           only that grpc's Stop was held; after, it
//	                           says the socket tables told
func TestAHeldStepSaysWhenTheSocketTablesToldItsRPCsApart(t *testing.T) {
	g := &drain.Gate{}
	busy := serve(t, g, "tcp")
	stream, err := openStream(t, t.Context(), busy.worker)
	require.NoError(t, err)
	quiet := quietAndHeld(t, g)

	var detail any
	runOnceClosed(t, quiet, func() {}, func(ctx context.Context) {
		detail, err = Step("grpc", wrappedServer{quiet.srv}, g, time.Second).Run(ctx)
	})
	require.NoError(t, err, "busy's stream listens on: not quiet's")
	require.IsType(t, "", detail)
	assert.Contains(t, detail, heldStop)
	assert.Contains(t, detail, "by the socket tables", "the nil rests on an address")
	require.NoError(t, stream.CloseSend())
}

// Fault (row 2588): the same with a Unix socket: a server's successor (a
// new process of a rolling update, on the node's same socket path) removed
// the path, as a server starting removes a stale socket, and bound it
// while the server still served; the server's Stop then unlinked the path
// (Go's listener removes its path as it closes), the successor's socket
// still bound to it, which /proc/net/unix shows, and a held Stop took the
// server's own stream for the successor's and reported nothing cut.
//
//	a (unix socket P)   a stream runs, a connection in its handshake
//	another process     removes P, listens on P
//	Stop(a)             closes a's listener, unlinks P; the successor's socket still listens
//	the deadline        before: nil; after: a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCWhenItsSuccessorListensOnItsSocketPath(t *testing.T) {
	g := &drain.Gate{}
	a := serve(t, g, "unix")
	holdWithItsOwnStream(t, a)
	listenInAnotherProcess(t, a.addr)

	err := stopOnceClosed(t, a, g, func() {
		assert.NoFileExists(t, a.addr.String(), "a's listener unlinked the path the successor listens on")
	})
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// reusePort sets SO_REUSEPORT on a socket before it binds.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}

// Fault (row 2581): two servers of one process listening on one address
// with SO_REUSEPORT (a group the kernel spreads connections over): a held
// Stop of one took its own stream for the other's, whose socket still
// listened on that address, and reported nothing cut.
//
//	a (127.0.0.1:P)   a stream runs, a connection in its handshake
//	b (127.0.0.1:P)   joins a's SO_REUSEPORT group
//	Stop(a)           the deadline: before nil; after a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCBesideAnotherListenerOfItsReusePortGroup(t *testing.T) {
	g := &drain.Gate{}
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
	holdWithItsOwnStream(t, a) // a's: b does not listen yet
	lnB, err := lc.Listen(t.Context(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	serveOn(t, g, lnB, unchanged, dialing(lnB.Addr()))

	err = stopOnceClosed(t, a, g, func() {})
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// And exactly: the other server's stream in that group, when the stopped
// server ran none, is not counted (a listener closed on its address would
// not tell the two apart).
func TestAHeldStopIsNotBlamedForTheRPCOfAnotherServerOfItsReusePortGroup(t *testing.T) {
	g := &drain.Gate{}
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
	holdInHandshake(t, a) // a's: b does not listen yet
	lnB, err := lc.Listen(t.Context(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	b := serveOn(t, g, lnB, unchanged, dialing(lnB.Addr()))

	var stream testgrpc.TestService_FullDuplexCallClient
	err = stopOnceClosed(t, a, g, func() {
		stream, err = openStream(t, t.Context(), b.worker) // b's: a's listener is closed
		require.NoError(t, err)
	})
	require.NoError(t, err, "a ran no RPC: b's stream is not its cut")
	require.NoError(t, stream.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = stream.Recv()
	require.NoError(t, err, "b's stream runs on")
	require.NoError(t, stream.CloseSend())
}

// Fault (row 2582): a server given its listener as a file descriptor
// (systemd's socket activation: net.FileListener on the descriptor systemd
// passed, which keeps its own): closing it closed the server's descriptor,
// not the socket, which listened on, so a held Stop took the server's own
// stream for another server's and reported nothing cut.
//
//	a (a descriptor of a socket on 127.0.0.1:P, another one kept)
//	Stop(a)   the deadline: before nil; after a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCOnAListenerGivenAsADescriptor(t *testing.T) {
	g := &drain.Gate{}
	sock, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	kept, err := sock.(*net.TCPListener).File() // systemd's descriptor of the socket
	require.NoError(t, err)
	require.NoError(t, sock.Close())
	t.Cleanup(func() { kept.Close() })
	ln, err := net.FileListener(kept) // as go-systemd's activation.Listeners does
	require.NoError(t, err)
	a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
	holdWithItsOwnStream(t, a)

	err = stopOnceClosed(t, a, g, func() {})
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}

// Fault (row 2583): a held Stop blamed a server with no RPC for the stream
// another server ran on a Unix socket whose name /proc/net/unix shows
// otherwise than Go does: a space or a newline in its path (the table
// separates its fields with spaces and its lines with newlines), or a NUL
// inside an abstract name (the table shows '@'; Go's name ends at it). The
// other server's socket was not found listening, so its stream counted as
// cut.
//
//	busy (unix socket)   a stream runs on
//	quiet (tcp)          no RPC, a connection in its handshake
//	Stop(quiet)          the deadline: before "cut"; after nil, busy's stream answers on
func TestAHeldStopIsNotBlamedForAnRPCOnAUnixSocketTheTableNamesOtherwise(t *testing.T) {
	for name, path := range listeningtest.UnixNamesShownOtherwise(t, "drainkit", "agent") {
		t.Run(name, func(t *testing.T) {
			g := &drain.Gate{}
			ln, err := net.Listen("unix", path)
			require.NoError(t, err)
			busy := serveOn(t, g, ln, unchanged, dialing(&net.UnixAddr{Name: path, Net: "unix"}))
			stream, err := openStream(t, t.Context(), busy.worker)
			require.NoError(t, err)
			quiet := quietAndHeld(t, g)

			err = stopOnceClosed(t, quiet, g, func() {})
			require.NoError(t, err, "quiet ran no RPC: busy's stream is not its cut")
			require.NoError(t, stream.Send(&testgrpc.StreamingOutputCallRequest{}))
			_, err = stream.Recv()
			require.NoError(t, err, "busy's stream runs on")
			require.NoError(t, stream.CloseSend())
		})
	}
}

// Fault (row 2589): a held Stop blamed a server with no RPC for the stream
// that another *grpc.Server ran through an http.Server (ServeHTTP, h2c) on
// the same gate, the drain's one: such an RPC has no address of a grpc
// listener (row 2381 left it out: grpc's Stop closes no listener of an
// http.Server's), so it counted as cut, whichever server's it was.
//
//	busy (grpc through an http.Server)   a stream runs on
//	quiet (tcp)                          no RPC, a connection in its handshake
//	Stop(quiet)                          the deadline: before "cut"; after nil,
//	                                     busy's stream answers on
func TestAHeldStopIsNotBlamedForAnRPCAnotherServerRunsThroughAnHTTPServer(t *testing.T) {
	g := &drain.Gate{}
	busy := grpc.NewServer(
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor(g, Methods(nil, drain.Checkpoint))),
		grpc.ChainStreamInterceptor(StreamServerInterceptor(g, Methods(nil, drain.Checkpoint))),
	)
	testgrpc.RegisterTestServiceServer(busy, worker{})
	hs := &http.Server{Handler: busy, Protocols: new(http.Protocols)}
	hs.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close(); busy.Stop() })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	stream, err := openStream(t, t.Context(), testgrpc.NewTestServiceClient(conn))
	require.NoError(t, err)
	quiet := quietAndHeld(t, g)

	err = stopOnceClosed(t, quiet, g, func() {})
	require.NoError(t, err, "quiet ran no RPC: busy's stream is not its cut")
	require.NoError(t, stream.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = stream.Recv()
	require.NoError(t, err, "busy's stream runs on")
	require.NoError(t, stream.CloseSend())
}

// Fault (row 2584): a held Stop took its server's own stream for another
// server's when a wildcard listener of the other IP family was on its
// port: an IPv4 one (0.0.0.0), which no IPv6 connection reaches, or an
// IPv6-only one (::, as Go's "tcp6" listens), which no IPv4 connection
// reaches; the table matched it all the same, and the step reported
// nothing cut.
//
//	a (127.0.0.1:P or [::1]:P)   a stream runs, a connection in its handshake
//	another socket               listens on the other family's wildcard, port P
//	Stop(a)                      the deadline: before nil; after a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCBesideAWildcardListenerOfTheOtherFamily(t *testing.T) {
	for name, nets := range map[string][2]string{
		"ipv6 RPC, 0.0.0.0 on its port":      {"tcp6", "tcp4"},
		"ipv4 RPC, ipv6-only :: on its port": {"tcp4", "tcp6"},
	} {
		t.Run(name, func(t *testing.T) {
			g := &drain.Gate{}
			loopback := map[string]string{"tcp4": "127.0.0.1", "tcp6": "::1"}[nets[0]]
			ln, err := net.Listen(nets[0], net.JoinHostPort(loopback, "0"))
			if err != nil && nets[0] == "tcp6" {
				t.Skip("no IPv6 loopback here:", err)
			}
			require.NoError(t, err)
			a := serveOn(t, g, ln, unchanged, dialing(ln.Addr()))
			holdWithItsOwnStream(t, a)
			other, err := net.Listen(nets[1], fmt.Sprintf(":%d", ln.Addr().(*net.TCPAddr).Port))
			if err != nil && nets[1] == "tcp6" {
				t.Skip("no IPv6 here:", err)
			}
			require.NoError(t, err)
			t.Cleanup(func() { other.Close() })

			err = stopOnceClosed(t, a, g, func() {})
			require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
		})
	}
}

// onThreadOfItsOwn runs f on a thread locked to it and never unlocked: the
// thread ends with f's goroutine, for f changes its namespace. Never on
// the process's main thread, which Go does not end and whose namespace
// /proc/net shows: that one is kept busy while another runs f.
func onThreadOfItsOwn[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			v, err := onThreadOfItsOwn(f)
			runtime.UnlockOSThread()
			done <- result{v, err}
			return
		}
		v, err := f()
		done <- result{v, err}
	}()
	r := <-done
	return r.v, r.err
}

// netNS is a network namespace of this test's, not the process's, with its
// loopback up.
type netNS struct{ fd int }

// newNetNS makes one, or skips the test where it may not (no root).
func newNetNS(t *testing.T) netNS {
	t.Helper()
	fd, err := onThreadOfItsOwn(func() (int, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return 0, err
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		// Forked from this thread, ip runs in the namespace.
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			unix.Close(fd)
			return 0, fmt.Errorf("ip link set lo up: %w: %s", err, out)
		}
		return fd, nil
	})
	if err != nil {
		t.Skip("no network namespace of its own here:", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return netNS{fd}
}

// do runs f on a thread in the namespace: the sockets f makes are there.
func (ns netNS) do(f func() error) error {
	_, err := onThreadOfItsOwn(func() (struct{}, error) {
		if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
			return struct{}{}, err
		}
		return struct{}{}, f()
	})
	return err
}

// Fault (row 2585): a held Stop of a server listening in a network
// namespace of its own (a listener made on a thread moved into a sandbox's
// namespace) read the process's socket tables, /proc/net, which are those
// of another namespace: a socket on the same address there (the host's
// server on 127.0.0.1:P) made it take its own stream for another server's,
// and report nothing cut.
//
//	a (127.0.0.1:P, in its namespace)   a stream runs, a connection in its handshake
//	b (127.0.0.1:P, the process's)      listens
//	Stop(a)                             the deadline: before nil; after a's stream counts as cut
func TestAHeldStopCountsItsOwnRPCInAnotherNetworkNamespace(t *testing.T) {
	ns := newNetNS(t)
	g := &drain.Gate{}
	var ln net.Listener
	require.NoError(t, ns.do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}))
	addr := ln.Addr()
	a := serveOn(t, g, ln, unchanged, func(ctx context.Context) (c net.Conn, err error) {
		err = ns.do(func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, addr.Network(), addr.String())
			return err
		})
		return c, err
	})
	holdWithItsOwnStream(t, a)
	b, err := net.Listen("tcp", addr.String())
	require.NoError(t, err, "the process's namespace has its own 127.0.0.1:%d", addr.(*net.TCPAddr).Port)
	t.Cleanup(func() { b.Close() })

	err = stopOnceClosed(t, a, g, func() {})
	require.ErrorIs(t, err, context.Canceled, "a's own stream, cut by its Stop")
}
