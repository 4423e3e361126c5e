package draingrpc

import (
	"context"
	"net/http"
	"reflect"
	"sync"

	"google.golang.org/grpc"
)

// grpcPkg is the import path of grpc-go's package, where its key is
// declared.
var grpcPkg = reflect.TypeFor[grpc.Server]().PkgPath()

// serverKey is grpc-go's context key for the *grpc.Server serving an RPC,
// learned once per process (learnServerKey); nil when it could not be.
var serverKey = sync.OnceValue(learnServerKey)

// serverOf returns the *grpc.Server serving the RPC of ctx, or nil when
// ctx does not say. grpc-go (v1.85: Server.handleStream) puts the Server
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

// learnServerKey serves one RPC through a grpc.Server of its own, in
// process (ServeHTTP on a request made here: no socket, no connection),
// and finds grpc's key in its handler's context. There nothing but
// grpc's and the standard library's contexts lie between the handler and
// the key, which findServerKey walks through; an RPC of the user's server
// may have a context of the user's own type in between (a stats handler's
// TagRPC runs after grpc names the server, an interceptor ahead of
// drainkit's), which it cannot walk through, and then no RPC of that
// server showed the key (row 2660). It returns nil when the handler's
// context holds no key of grpc's type serverKey.
//
// What else could tell an RPC's server was read in grpc-go v1.85 and
// found less exact: the peer's local address is shared by other sockets
// (rows 2580 to 2585); a stats.Handler's ConnBegin or a listener's
// accepts need an option the user passes to grpc.NewServer, which
// drainkit's API does not have; grpc's channelz drops a server's entry as
// its Stop begins; a ServerTransportStream, the interceptor's info and
// the service registered say nothing of the server.
func learnServerKey() any {
	var key any
	probe := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		key, _ = findServerKey(ss.Context())
		return nil
	}))
	req, err := http.NewRequest(http.MethodPost, "/drainkit.draingrpc.Probe/LearnServerKey", http.NoBody)
	if err != nil {
		return nil
	}
	req.ProtoMajor, req.ProtoMinor = 2, 0 // grpc serves HTTP/2 requests only
	req.Header.Set("Content-Type", "application/grpc")
	probe.ServeHTTP(&probeResponse{header: make(http.Header)}, req)
	probe.GracefulStop() // waits for the handler, which set key
	return key
}

// probeResponse is the response of learnServerKey's RPC, dropped: an
// http.ResponseWriter that flushes, as grpc's ServeHTTP needs.
type probeResponse struct{ header http.Header }

func (w *probeResponse) Header() http.Header         { return w.header }
func (w *probeResponse) Write(b []byte) (int, error) { return len(b), nil }
func (w *probeResponse) WriteHeader(int)             {}
func (w *probeResponse) Flush()                      {}

// findServerKey walks ctx's chain of parents, through the field that the
// standard library's contexts keep their parent in (an embedded Context),
// for a context.WithValue whose key is of grpc's type serverKey, and
// returns a key of that type: its zero value, which is the key (an empty
// struct). A context of another kind in the chain ends the walk.
func findServerKey(ctx context.Context) (any, bool) {
	v := reflect.ValueOf(ctx)
	for {
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return nil, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return nil, false
		}
		if k, ok := field(v, "key"); ok && k.Kind() == reflect.Interface && !k.IsNil() {
			if t := k.Elem().Type(); t.PkgPath() == grpcPkg && t.Name() == "serverKey" {
				return reflect.Zero(t).Interface(), true
			}
		}
		parent, ok := field(v, "Context")
		if !ok {
			return nil, false
		}
		v = parent
	}
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
