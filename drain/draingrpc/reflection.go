package draingrpc

import (
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
)

// reflectionPrefixes are the full method prefixes of the server reflection
// service as google.golang.org/grpc/reflection registers it: v1, and
// v1alpha for older tools. (Spelled out: importing its generated packages
// would compile them into every server.)
var reflectionPrefixes = [...]string{"/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

func isReflection(method string) bool {
	for _, p := range reflectionPrefixes {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// errReflectionStopping is the status of a reflection stream ended by Stop.
var errReflectionStopping = status.Error(codes.Unavailable, "server stopping: reflection stream ended; ask another server")

// serveReflection runs a server reflection stream ungated and uncounted:
// it is no work, a tool keeps it open between its requests (grpcurl's and
// grpcui's client does) so the drain must not wait for it, and an
// operator's grpcurl of an exempt method during the drain resolves that
// method through it. When a Stop with g begins (or has begun) the stream
// ends with errReflectionStopping, as a health Watch does: the reflection
// handler waits in RecvMsg for the next request, which no context of ours
// wakes, so it is RecvMsg that returns.
func serveReflection(g *drain.Gate, srv any, ss grpc.ServerStream, h grpc.StreamHandler) error {
	rs := &reflectionStream{ServerStream: ss, stopping: watchStops(g)}
	err := h(srv, rs)
	if rs.stopped.Load() && ss.Context().Err() == nil {
		return errReflectionStopping
	}
	return err
}

// reflectionStream is a reflection stream whose RecvMsg a Stop ends.
type reflectionStream struct {
	grpc.ServerStream
	stopping <-chan struct{}
	stopped  atomic.Bool
}

// RecvMsg returns the next request, or errReflectionStopping once a Stop
// begins. The stream's own RecvMsg then goes on in its goroutine until the
// stream ends, which it does as soon as the handler returned: grpc cancels
// a finished stream's receive, for a handler that receives in another
// goroutine. The reflection handler drops m on an error, so nothing reads
// what that RecvMsg may still write into it.
func (s *reflectionStream) RecvMsg(m any) error {
	received := goOp(func() error { return s.ServerStream.RecvMsg(m) })
	select {
	case r := <-received:
		return r.get()
	case <-s.stopping:
		s.stopped.Store(true)
		return errReflectionStopping
	}
}
