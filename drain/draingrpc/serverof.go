package draingrpc

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"

	"google.golang.org/grpc"
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

// startLearning starts keyLearning, on its first call only.
var startLearning = sync.OnceFunc(func() { go keyLearning.learn() })

// learning is keyLearning's: key is set before done is closed.
type learning struct {
	done chan struct{}
	key  any
}

func (l *learning) learn() {
	defer close(l.done)
	var why string
	l.key, why = learnServerKey()
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

// learnServerKey serves one unary RPC through a grpc.Server of its own, in
// process (ServeHTTP on a request made here: no socket, no connection),
// and finds grpc's key in its handler's context. That server has the
// process's global server options too (grpc-go's AddGlobalServerOptions,
// through which its observability packages, and a program's own code,
// give every grpc.NewServer theirs), where an interceptor that refuses
// what it does not know, an authorization policy's, refused the RPC before
// its handler ran (row 3100). No server option takes those away, so the
// RPC is one that runs none of them: grpc-go (v1.85: wrapUnaryHandler)
// calls a unary method's handler itself and hands it the chain of unary
// interceptors to call, which this handler does not; stream interceptors
// never run for a unary method. A global stats handler still runs, and
// may have put a context of its own type over grpc's (row 3100), which
// findServerKey walks through. It returns nil when the handler's context
// holds no key of grpc's type serverKey that names this server.
//
// grpc logs the server at INFO ("[core] [Server #N] Server created";
// at verbosity 2 also its transport's "Closing: finished writing
// status"), and a global stats handler counts its RPC (probeService,
// probeMethod): grpc has no option that quiets one server's logs (its
// logger is the process's, grpclog.SetLoggerV2) nor one that leaves out
// the global options.
//
// What else could tell an RPC's server was read in grpc-go v1.85 and
// found less exact: the peer's local address is shared by other sockets
// (rows 2580 to 2585); a stats.Handler's ConnBegin or a listener's
// accepts need an option the user passes to grpc.NewServer, which
// drainkit's API does not have; grpc's channelz drops a server's entry as
// its Stop begins; a ServerTransportStream, the interceptor's info and
// the service registered say nothing of the server.
func learnServerKey() (key any, why string) {
	handled := false
	probe := grpc.NewServer()
	probe.RegisterService(&grpc.ServiceDesc{
		ServiceName: probeService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: probeMethod,
			// The interceptors are the caller's to run, and are not run.
			Handler: func(_ any, ctx context.Context, _ func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				handled = true
				if k, ok := findServerKey(ctx); ok && ctx.Value(k) == probe {
					key = k
				}
				return &emptypb.Empty{}, nil
			},
		}},
	}, struct{}{})
	req, err := http.NewRequest(http.MethodPost, probeFullMethod, http.NoBody)
	if err != nil {
		return nil, "drainkit's RPC could not be made: " + err.Error()
	}
	req.ProtoMajor, req.ProtoMinor = 2, 0 // grpc serves HTTP/2 requests only
	req.Header.Set("Content-Type", "application/grpc")
	req = asIfOnLoopback(req)
	panicked := serveProbe(probe, req)
	probe.GracefulStop() // waits for the handler, which set key and handled
	switch {
	case key != nil:
		return key, ""
	case panicked != nil:
		return nil, fmt.Sprintf("a process-wide stats handler (grpc's AddGlobalServerOptions) panicked on the connection of drainkit's RPC %s, served in process: %v", probeFullMethod, panicked)
	case !handled:
		return nil, "drainkit's RPC " + probeFullMethod + " did not reach its handler: a process-wide server option (grpc's AddGlobalServerOptions) refused it"
	}
	return nil, "no context of drainkit's RPC " + probeFullMethod + " holds grpc's key naming its server: a grpc-go (this binary's: v" + grpc.Version + ") that no longer names an RPC's server there, " +
		"or a process-wide stats handler whose context keeps grpc's in a field of no context type (declare it context.Context)"
}

// serveProbe serves req through probe, and recovers a panic of this
// goroutine's: under ServeHTTP, grpc calls a connection's stats handlers
// (TagConn, HandleConn) on the caller's goroutine, the learning's, and a
// process-wide one that panics on the connection of drainkit's RPC alone
// ended the process there (row 3441). Unwinding runs grpc's own deferred
// cleanup of the connection (ServeHTTP's removeConn, serveStreams' Close),
// so probe's GracefulStop still returns. A panic in an RPC's stats
// handlers (TagRPC, HandleRPC) is on grpc's goroutine, out of reach.
func serveProbe(probe *grpc.Server, req *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	probe.ServeHTTP(&probeResponse{header: make(http.Header)}, req)
	return nil
}

// asIfOnLoopback gives learnServerKey's request what grpc gives every RPC
// it serves, which a request made in process lacks: its client's address,
// the local address it came in on (grpc's transport takes both from the
// connection; under ServeHTTP, net/http puts them in the request) and an
// :authority (grpc refuses a request with none, as net/http's HTTP/2
// server does). A process-wide stats handler that reads them as grpc gives
// them (a label of the listener, of the client's IP) runs on this RPC too,
// on grpc's goroutine, where a panic ends the process: without them it
// served every RPC of the program and ended it at drainkit's (row 3440).
// The RPC is served in process, so the addresses are loopback's, with no
// port.
func asIfOnLoopback(req *http.Request) *http.Request {
	req.RemoteAddr = "127.0.0.1:0"
	req.Host = "localhost"
	local := net.Addr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	return req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
}

// The service and method of learnServerKey's RPC, as a process-wide stats
// handler (grpc's OpenTelemetry metrics) names it.
const (
	probeService = "drainkit.draingrpc.Probe"
	probeMethod  = "LearnServerKey"

	probeFullMethod = "/" + probeService + "/" + probeMethod
)

// probeResponse is the response of learnServerKey's RPC, dropped: an
// http.ResponseWriter that flushes, as grpc's ServeHTTP needs.
type probeResponse struct{ header http.Header }

func (w *probeResponse) Header() http.Header         { return w.header }
func (w *probeResponse) Write(b []byte) (int, error) { return len(b), nil }
func (w *probeResponse) WriteHeader(int)             {}
func (w *probeResponse) Flush()                      {}

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
