package draingrpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
)

// A Classifier maps a gRPC full method name ("/pkg.Service/Method") to the
// operation class the gate admits it as.
type Classifier func(fullMethod string) drain.Class

// Methods returns a Classifier from a table of full method names; methods
// not in it get class def.
func Methods(table map[string]drain.Class, def drain.Class) Classifier {
	return func(m string) drain.Class {
		if c, ok := table[m]; ok {
			return c
		}
		return def
	}
}

// UnaryServerInterceptor admits every unary RPC through g as one operation
// of the class classify gives its method. While the gate is closed and the
// class is gated it answers codes.Unavailable ("node draining: ...") without
// calling the handler, so clients retry on another node; an admitted RPC
// counts as in flight until its handler returns.
//
// The health service (grpc.health.v1.Health: Check, List) is never gated,
// whatever classify says, and once the gate is closed every SERVING it
// answers becomes NOT_SERVING: load balancers and gRPC readiness probes
// stop sending work at once, without the server flipping its health
// server itself.
func UnaryServerInterceptor(g *drain.Gate, classify Classifier) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if isHealth(info.FullMethod) {
			resp, err := h(ctx, req)
			if err == nil && g.Closed() {
				resp = notServing(resp)
			}
			return resp, err
		}
		leave, err := enter(g, classify, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer leave()
		return h(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming RPCs: a
// stream counts as in flight until its handler returns. The health
// service's Watch is never gated; a Watch open when the gate closes
// receives NOT_SERVING at once, and no SERVING after it.
func StreamServerInterceptor(g *drain.Gate, classify Classifier) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if isHealth(info.FullMethod) {
			return watchHealth(g, srv, ss, h)
		}
		leave, err := enter(g, classify, info.FullMethod)
		if err != nil {
			return err
		}
		defer leave()
		return h(srv, ss)
	}
}

func enter(g *drain.Gate, classify Classifier, method string) (func(), error) {
	leave, err := g.Enter(classify(method))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node draining: not accepting new work (%s): retry on another node", method)
	}
	return leave, nil
}

// A Server is what Stop needs of a *grpc.Server.
type Server interface {
	GracefulStop()
	Stop()
}

// Stop stops s within ctx: it calls GracefulStop, which stops accepting
// connections and waits for every RPC to finish, and when ctx ends first it
// calls Stop, which closes every connection and cancels the RPCs still
// running. It returns nil once GracefulStop returned, or ctx's error once
// Stop returned when Stop had to be called. (GracefulStop alone has no
// deadline: one stuck RPC would hold the process until SIGKILL.)
//
// A *grpc.Server's GracefulStop waits for every handler to return, even
// after Stop closed the connections: a handler that ignores its cancelled
// context keeps GracefulStop, in a goroutine of its own, running until it
// returns, and Stop does not wait for it (its RPC has ended for the
// client). A server made with grpc.WaitForHandlers(true) has Stop itself
// wait for the handlers, and then Stop returns only when they do.
func Stop(ctx context.Context, s Server) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.GracefulStop()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.Stop()
	return ctx.Err()
}

// Step returns a drain teardown Step that runs Stop on s with the step's
// context: GracefulStop, then Stop at the step's deadline.
func Step(name string, s Server, reserve time.Duration) drain.Step {
	return drain.NewStep(deadline.Phase{Name: name, Reserve: deadline.Fixed(reserve)}, func(ctx context.Context) (any, error) {
		if err := Stop(ctx, s); err != nil { // ctx's error: Stop had to cut RPCs
			return nil, errors.Join(errors.New("RPCs still running at the deadline; stopped them"), err)
		}
		return nil, nil
	})
}
