// Package draingrpc connects a gRPC server to a drain.Drainer: interceptors
// that answer codes.Unavailable to new work once the node drains, and a
// bounded GracefulStop-then-Stop teardown step. A gRPC server's own
// GracefulStop has no deadline, and an unguarded RPC handler keeps taking
// new work while the node is going away; this package bounds the one and
// gates the other.
//
// It is its own package so that HTTP-only servers do not compile gRPC.
//
// Typical wiring:
//
//	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint}}
//	classify := draingrpc.Methods(map[string]drain.Class{
//		"/worker.Worker/Run":        drain.Create,
//		"/worker.Worker/Restore":    drain.Resume,
//		"/worker.Worker/Checkpoint": drain.Checkpoint,
//	}, drain.Create)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(draingrpc.UnaryServerInterceptor(gate, classify)),
//		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)),
//	)
//	d, err := drain.New(drain.Config{Budget: budget, Gate: gate, Sandboxes: lister,
//		Steps: []drain.Step{draingrpc.Step("grpc", srv, 5*time.Second)}})
//
// Guarantees: a gated RPC arriving after the gate closed never reaches its
// handler; Stop returns by its context's deadline plus the time Stop takes
// to close the connections.
package draingrpc
