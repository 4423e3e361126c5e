package draingrpc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/emptypb"
)

// grpcPkg is the import path of grpc-go's package, where its key is
// declared.
var grpcPkg = reflect.TypeFor[grpc.Server]().PkgPath()

// keyLearning learns grpc-go's context key for the *grpc.Server serving
// an RPC (learnServerKey), once per process, on a goroutine of its own
// that the first call of startLearning starts, as the first RPC an
// interceptor of draingrpc's admits begins (gateState.rpc): its RPC runs
// the process-wide stats handlers, whose code may hold it (a tracer
// exporting to a collector that does not answer), and no Stop waits for
// it: one held past its deadline reads what it learned (serverKey). Its
// channel is made as the package is initialized, outside any
// testing/synctest bubble: the first RPC may run in one (a test of a
// server's drain), and a channel made there would be that bubble's, which
// a Stop outside it may not read (the runtime ends the process).
var keyLearning = &learning{done: make(chan struct{})}

// learnOnce makes startLearning start keyLearning once.
var learnOnce sync.Once

// startLearning starts keyLearning, on its first call only, with an RPC
// of drainkit's own that comes as the RPC of context rpc came (origin).
func startLearning(rpc context.Context) {
	learnOnce.Do(func() {
		from := originOf(rpc)
		go keyLearning.learn(from)
	})
}

// learningBound is how long the learning waits for drainkit's RPC to be
// answered before it gives up the key, for the process's life: a
// process-wide stats handler may hold that RPC before its answer (a
// synchronous export to a collector that does not answer), which held
// its connection, its grpc.Server and their goroutines for ever (row
// 3780). Nothing waits for the learning (a Stop reads what it has, row
// 3300), so a longer bound costs only how long a held one keeps those,
// where one too short loses the key for good. Measured at load 33 to 35
// (2 cores): a process's first learning, p50 8.3 ms and p99 164 ms under
// -race (100 processes; 4.3 and 74 ms without), 200 in a row p99 94 to
// 138 ms (21 to 44 ms without), the slowest 0.27 s; 10 s is 60 times
// that p99 and 37 times that slowest.
const learningBound = 10 * time.Second

// learning is keyLearning's: key is set before done is closed.
type learning struct {
	done chan struct{}
	key  any
}

func (l *learning) learn(from origin) {
	defer close(l.done)
	var why string
	l.key, why = learnServerKey(from, learningBound)
	if l.key == nil {
		warnNotLearned(why)
	}
}

// warnNotLearned says, once per process (the learning runs once), at WARN
// through slog.Default (draingrpc has no Logger of its own), that grpc's
// key was not learned, why, and what it costs and what to do: each held
// Step's detail says so too, but only in the Report, after the drain, and
// the logs said nothing when it failed (row 3443).
func warnNotLearned(why string) {
	slog.Default().Warn("draingrpc: where grpc names an RPC's server was not learned: a Stop whose grpc Stop is held past its deadline will tell "+
		"its RPCs from other servers' by the socket tables alone, which take an RPC of its own for another server's where another socket "+
		"listens on its address (another process's, an SO_REUSEPORT group's), and its Step's detail says so; make each grpc.Server with a "+
		"grpc.ConnectionTimeout shorter than its Step's reserve, so that a connection in its handshake does not hold its Stop",
		"cause", why)
}

// warnHeldOnce makes warnLearningHeld say it once per process.
var warnHeldOnce sync.Once

// warnLearningHeld says, once per process, at WARN through slog.Default,
// that a held Stop told its RPCs by the socket tables while the learning
// of grpc's key still ran: a process-wide stats handler may hold
// drainkit's RPC before it is answered, and a learning held so ends only
// at its bound (learningBound), when it says it as a failed one does
// (warnNotLearned); before row 3682, only the Step's detail, in the
// Report, said so. Nothing when the learning ended: it said so then, or
// learned the key.
func warnLearningHeld() {
	select {
	case <-keyLearning.done:
		return
	default:
	}
	warnHeldOnce.Do(func() {
		slog.Default().Warn("draingrpc: a Stop whose grpc Stop was held past its deadline told its RPCs from other servers' by the socket tables " +
			"alone, which take an RPC of its own for another server's where another socket listens on its address (another process's, an " +
			"SO_REUSEPORT group's): where grpc names an RPC's server is still being learned, drainkit's RPC " + probeFullMethod + " not answered yet " +
			"(a process-wide stats handler, grpc's AddGlobalServerOptions, may hold it: a synchronous export to a collector that does not answer); " +
			"make each grpc.Server with a grpc.ConnectionTimeout shorter than its Step's reserve, so that a connection in its handshake does not hold its Stop")
	})
}

// serverKey is grpc-go's context key for the *grpc.Server serving an RPC,
// once learned; nil when it could not be, or is not yet.
func serverKey() any {
	select {
	case <-keyLearning.done:
		return keyLearning.key
	default:
		return nil
	}
}

// serverOf returns the *grpc.Server serving the RPC of ctx, or nil when
// ctx does not say, or grpc's key is not learned (keyLearning). grpc-go
// (v1.85: Server.handleStream) puts the Server
// in every RPC's context before its stats handler and interceptors run,
// for its own stats, under a key of an unexported type, serverKey, that
// only grpc's internal packages may read; no exported name of grpc's ties
// an RPC to its server as exactly (see learnServerKey). Once the key is
// known, an RPC's Server is one ctx.Value away, as for grpc itself,
// through whatever contexts a stats handler or an interceptor put over
// grpc's. When grpc stops putting it there, or names its type otherwise,
// serverOf returns nil and Stop falls back on the socket tables
// (TestServerOfNamesTheServerOfAnRPC fails then, on the grpc update that
// did it).
func serverOf(ctx context.Context) *grpc.Server {
	key := serverKey()
	if key == nil {
		return nil
	}
	s, _ := ctx.Value(key).(*grpc.Server)
	return s
}

// learnServerKey serves one unary RPC through a grpc.Server of its own,
// on a loopback TCP connection of its own whose addresses are from's (see
// origin), and finds grpc's key in its handler's context. That server has
// the process's global server options too (grpc-go's
// AddGlobalServerOptions, through which its observability packages, and
// a program's own code, give every grpc.NewServer theirs), where an
// interceptor that refuses what it does not know, an authorization
// policy's, refused the RPC before its handler ran (row 3100). No server
// option takes those away, so the RPC is one that runs none of them:
// grpc-go (v1.85: wrapUnaryHandler) calls a unary method's handler itself
// and hands it the chain of unary interceptors to call, which this
// handler does not; stream interceptors never run for a unary method. A
// global stats handler still runs, on grpc's goroutines, where a panic
// ends the process, and may have put a context of its own type over
// grpc's (row 3100), which findServerKey walks through. It returns nil
// when the handler's context holds no key of grpc's type serverKey that
// names this server, or when its RPC is not answered once within has
// passed, with why.
//
// grpc logs the server at INFO ("[core] [Server #N] Server created",
// its listener's, its connection's), and a global stats handler counts
// its connection and its RPC (probeService, probeMethod): grpc has no
// option that quiets one server's logs (its logger is the process's,
// grpclog.SetLoggerV2) nor one that leaves out the global options.
//
// What else could tell an RPC's server was read in grpc-go v1.85 and
// found less exact: the peer's local address is shared by other sockets
// (rows 2580 to 2585); a stats.Handler's ConnBegin or a listener's
// accepts need an option the user passes to grpc.NewServer, which
// drainkit's API does not have; grpc's channelz drops a server's entry as
// its Stop begins; a ServerTransportStream, the interceptor's info and
// the service registered say nothing of the server.
func learnServerKey(from origin, within time.Duration) (key any, why string) {
	var handled atomic.Bool
	found := make(chan any, 1)
	probe := grpc.NewServer()
	probe.RegisterService(&grpc.ServiceDesc{
		ServiceName: probeService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: probeMethod,
			// The interceptors are the caller's to run, and are not run.
			Handler: func(_ any, ctx context.Context, _ func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				handled.Store(true)
				if k, ok := findServerKey(ctx); ok && ctx.Value(k) == probe {
					found <- k
				}
				return &emptypb.Empty{}, nil
			},
		}},
	}, struct{}{})
	client, conn, err := loopbackPair()
	if err != nil {
		probe.Stop() // what the process-wide options started with it (row 3683)
		return nil, "drainkit's RPC " + probeFullMethod + " found no loopback to be served on: " + err.Error()
	}
	go func() { _ = probe.Serve(newOneConnListener(originConn{Conn: conn, from: from})) }()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	err = callProbe(ctx, client, from.authority)
	if err != nil && ctx.Err() != nil {
		// Stop, where GracefulStop waits for the handler that holds the
		// RPC; not waited for either: it waits for the connection's
		// goroutine, which a process-wide TagConn or HandleConn may hold
		// (row 3780). Its connection, closed by callProbe, is gone.
		go probe.Stop()
		return nil, "drainkit's RPC " + probeFullMethod + " was not answered within " + within.String() + " (a healthy one takes milliseconds): " +
			"a process-wide stats handler (grpc's AddGlobalServerOptions) held it before its answer (a synchronous export as the RPC begins, " +
			"to a collector that does not answer) or the machine is starved; the learning ended, its connection closed and its server stopped"
	}
	// Not waited for: GracefulStop waits for the RPC's stats to end, which
	// a process-wide stats handler may hold (a synchronous export to a
	// collector that does not answer), and the key is known once the RPC
	// is answered (row 3681). Its connection, closed by callProbe, is gone.
	go probe.GracefulStop()
	select {
	case key = <-found: // sent before the handler answered, which callProbe read
		return key, ""
	default:
	}
	switch {
	case err != nil:
		return nil, "drainkit's RPC " + probeFullMethod + ", served on loopback, failed: " + err.Error()
	case !handled.Load():
		return nil, "drainkit's RPC " + probeFullMethod + " did not reach its handler: a process-wide server option (grpc's AddGlobalServerOptions) refused it"
	}
	return nil, "no context of drainkit's RPC " + probeFullMethod + " holds grpc's key naming its server: a grpc-go (this binary's: v" + grpc.Version + ") that no longer names an RPC's server there, " +
		"or a process-wide stats handler whose context keeps grpc's in a field of no context type (declare it context.Context)"
}

// An origin is where an RPC came from, as grpc gave it to the process-wide
// stats handlers: its client's address and the local one (net.Addr values
// of whatever type the user's listener or http.Server gave grpc), and its
// :authority. drainkit's RPC that learns grpc's key comes with those of
// the RPC that started the learning, which those handlers served already:
// one served through ServeHTTP carried grpc's own string type for the
// client's address, and a handler that reads it as the *net.TCPAddr of a
// TCP listener's connections, in an RPC's TagRPC, panicked there, on
// grpc's goroutine, and ended the process at the user's first RPC (row
// 3560); nor did it carry the addresses and :authority at all before row
// 3440. Where rpc names none (no RPC started the learning), they are the
// loopback connection's own.
type origin struct {
	remote, local net.Addr
	authority     string
}

// originOf is where the RPC of context rpc came from.
func originOf(rpc context.Context) origin {
	from := origin{authority: "localhost"}
	if p, ok := peer.FromContext(rpc); ok {
		from.remote, from.local = p.Addr, p.LocalAddr
	}
	if md, ok := metadata.FromIncomingContext(rpc); ok {
		if a := md.Get(":authority"); len(a) > 0 && a[0] != "" {
			from.authority = a[0]
		}
	}
	return from
}

// loopbackPair connects a TCP socket on 127.0.0.1 to a listener of its
// own, or on ::1 where that fails, and returns both ends: a namespace
// whose lo has ::1 alone (an IPv6-only pod) has no 127.0.0.1 to listen on,
// and the learning found no loopback there (row 3781). ::1 is the
// namespace's own loopback, as 127.0.0.1 is, and loopbackPairOn keeps
// other processes off it alike.
func loopbackPair() (client, server net.Conn, err error) {
	client, server, err = loopbackPairOn("127.0.0.1:0")
	if err == nil {
		return client, server, nil
	}
	client, server, err6 := loopbackPairOn("[::1]:0")
	if err6 != nil {
		return nil, nil, fmt.Errorf("%w; %w", err, err6)
	}
	return client, server, nil
}

// loopbackPairOn connects a TCP socket on the loopback address addr to a
// listener of its own and returns both ends, the listener closed: no
// other process's connection reaches drainkit's RPC. A tenant sharing the
// network namespace sees a loopback listener in /proc/net/tcp and may
// connect to it; one that called drainkit's method on the learner's
// listener, left open until drainkit's RPC was answered, filled its
// one-key channel and held drainkit's RPC in its handler for ever (row
// 3680). A connection accepted that is not client's, another process's
// that came in the moment the listener was open, is closed.
func loopbackPairOn(addr string) (client, server net.Conn, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	for {
		server, err = ln.Accept()
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		if server.RemoteAddr().String() == client.LocalAddr().String() {
			return client, server, nil
		}
		server.Close()
	}
}

// oneConnListener is learnServerKey's listener: it gives grpc one
// connection, then none until it is closed.
type oneConnListener struct {
	conn      chan net.Conn // the connection, until Accept takes it
	addr      net.Addr
	closed    chan struct{}
	closeOnce sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{conn: make(chan net.Conn, 1), addr: c.LocalAddr(), closed: make(chan struct{})}
	l.conn <- c
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.conn:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close closes the connection too where grpc never took it.
func (l *oneConnListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	select {
	case c := <-l.conn:
		return c.Close()
	default:
		return nil
	}
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

// originConn is a connection that gives from's addresses for its own.
type originConn struct {
	net.Conn
	from origin
}

func (c originConn) RemoteAddr() net.Addr {
	if c.from.remote != nil {
		return c.from.remote
	}
	return c.Conn.RemoteAddr()
}

func (c originConn) LocalAddr() net.Addr {
	if c.from.local != nil {
		return c.from.local
	}
	return c.Conn.LocalAddr()
}

// callProbe calls drainkit's RPC on conn, as a grpc client does over
// HTTP/2 without TLS, with authority for its :authority, reads its answer
// whole, or gives up as ctx ends, and closes conn. Not with grpc's own
// client: that runs the process-wide dial options (grpc's
// AddGlobalDialOptions) as well.
func callProbe(ctx context.Context, conn net.Conn, authority string) error {
	defer conn.Close() // where the transport never took it
	dial := make(chan net.Conn, 1)
	dial <- conn
	var h2c http.Protocols // HTTP/2 without TLS: the server has none of its own
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c, DialContext: func(context.Context, string, string) (net.Conn, error) {
		select {
		case c := <-dial:
			return c, nil
		default: // the one connection there is was taken
			return nil, net.ErrClosed
		}
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+conn.RemoteAddr().String()+probeFullMethod, bytes.NewReader(emptyMessage))
	if err != nil {
		return err
	}
	req.Host = authority
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// emptyMessage is a gRPC message of no bytes, as a request's body frames
// it: not compressed, its length zero.
var emptyMessage = []byte{0, 0, 0, 0, 0}

// The service and method of learnServerKey's RPC, as a process-wide stats
// handler (grpc's OpenTelemetry metrics) names it.
const (
	probeService = "drainkit.draingrpc.Probe"
	probeMethod  = "LearnServerKey"

	probeFullMethod = "/" + probeService + "/" + probeMethod
)

// contextType is context.Context's interface type.
var contextType = reflect.TypeFor[context.Context]()

// maxContexts bounds findServerKey's walk: an RPC's context holds a few
// dozen.
const maxContexts = 1000

// findServerKey walks ctx and the contexts it holds, breadth first: each
// field of its struct (and of the structs it embeds) declared of a type
// that is a context (isContextField), whatever the field's name and the
// context's type (the standard library's embedded Context, WithoutCancel's
// c, the parent a stats handler's own type keeps), for a context.WithValue whose key is
// of grpc's type serverKey, and returns a key of that type: its zero
// value, which is the key (an empty struct). It looks at no more than
// maxContexts contexts, each once.
func findServerKey(ctx context.Context) (any, bool) {
	queue := []reflect.Value{reflect.ValueOf(ctx)}
	seen := make(map[uintptr]bool)
	for n := 0; len(queue) > 0 && n < maxContexts; n++ {
		v := queue[0]
		queue = queue[1:]
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				break
			}
			if v.Kind() == reflect.Pointer {
				if seen[v.Pointer()] {
					break
				}
				seen[v.Pointer()] = true
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if k, ok := field(v, "key"); ok && k.Kind() == reflect.Interface && !k.IsNil() {
			if t := k.Elem().Type(); t.PkgPath() == grpcPkg && t.Name() == "serverKey" {
				return reflect.Zero(t).Interface(), true
			}
		}
		queue = appendContexts(queue, v)
	}
	return nil, false
}

// appendContexts appends to queue the contexts that struct v's fields
// hold, those of the structs it embeds included.
func appendContexts(queue []reflect.Value, v reflect.Value) []reflect.Value {
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case f.Kind() == reflect.Struct && v.Type().Field(i).Anonymous:
			queue = appendContexts(queue, f)
		case isContextField(f) && !f.IsNil():
			queue = append(queue, f)
		}
	}
	return queue
}

// isContextField reports whether field f is declared of a type that is a
// context (an interface or a pointer type that implements
// context.Context), which its type alone tells, before any read of f: the
// other fields of a context may be written while the walk runs (a
// cancelCtx's cause, under a lock the walk does not take, by a cancel on
// another goroutine), and a value that is a context (context.WithValue's
// val) is no part of the chain ctx.Value walks.
func isContextField(f reflect.Value) bool {
	k := f.Kind()
	return (k == reflect.Interface || k == reflect.Pointer) && f.Type().Implements(contextType)
}

// field is struct v's field of that name, promoted ones included, and
// whether it has one that can be reached (not through a nil embedded
// pointer).
func field(v reflect.Value, name string) (reflect.Value, bool) {
	sf, ok := v.Type().FieldByName(name)
	if !ok {
		return reflect.Value{}, false
	}
	f, err := v.FieldByIndexErr(sf.Index)
	return f, err == nil
}
