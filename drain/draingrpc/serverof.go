package draingrpc

import (
	"context"
	"reflect"
	"sync/atomic"

	"google.golang.org/grpc"
)

// serverKeyBox holds grpc-go's context key for the *grpc.Server serving an
// RPC, once serverOf found it.
type serverKeyBox struct{ key any }

var grpcServerKey atomic.Pointer[serverKeyBox]

// grpcPkg is the import path of grpc-go's package, where its key is
// declared.
var grpcPkg = reflect.TypeFor[grpc.Server]().PkgPath()

// serverOf returns the *grpc.Server serving the RPC of ctx, or nil when
// ctx does not say. grpc-go (v1.85: Server.handleStream) puts the Server
// in every RPC's context before its interceptors run, for its own stats,
// under a key of an unexported type, serverKey, that only grpc's
// internal packages may read. A key of that type is found once, by its
// type, in the chain of the first context that has one; an RPC's Server
// is then one ctx.Value away, as for grpc itself. When grpc stops putting
// it there, or names the type otherwise, serverOf returns nil and Stop
// falls back on the socket tables (TestServerOfNamesTheServerOfAnRPC
// fails then, on the grpc update that did it).
func serverOf(ctx context.Context) *grpc.Server {
	box := grpcServerKey.Load()
	if box == nil {
		key, ok := findServerKey(ctx)
		if !ok {
			return nil
		}
		box = &serverKeyBox{key}
		grpcServerKey.Store(box)
	}
	s, _ := ctx.Value(box.key).(*grpc.Server)
	return s
}

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
