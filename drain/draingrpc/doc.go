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
//		Steps: []drain.Step{draingrpc.Step("grpc", srv, gate, 5*time.Second)}})
//
// Then serve the preStop hook (d.PreStop()) on a small HTTP listener,
// register the signals before serving, serve srv and end main with
// d.ServeSignals. Keep grpc's Serve error: one other than
// grpc.ErrServerStopped means serving stopped on its own, and the node
// should drain at once and exit 1 (Example_servingStopsOnItsOwn).
//
// The standard health service (grpc.health.v1.Health, for example
// google.golang.org/grpc/health's server) needs no wiring of its own: the
// interceptors never gate it, whatever the Classifier says, and from the
// moment the gate closes its Check and List answer NOT_SERVING where the
// health server says SERVING, and an open Watch receives NOT_SERVING at
// once. Load balancers and Kubernetes gRPC readiness probes therefore stop
// routing to the node as soon as the preStop hook (or SIGTERM) closes the
// gate, while the probes themselves keep getting answers. A Watch never
// ends by itself, so it is ended (codes.Unavailable, "server stopping",
// after a final NOT_SERVING) when the drain's preserve phase ends
// (drain.Gate.StreamsEnded), as a drain.Stream is, or as a Stop with the
// gate (the step's GracefulStop) begins if that is first: GracefulStop
// waits for the work RPCs, not for a load balancer's Watch, and a server
// served through an http.Server's ServeHTTP, which has no Stop, is not
// held by one in that server's HTTP step. A stream the Classifier says is a drain.Stream (a log
// follow, an attach), or a unary RPC it says is one (a long-poll), ends
// the same way (codes.Unavailable, "server stopping"), at the moment an
// HTTP one the gate admitted ends: when the drain's preserve phase ends
// (drain.Gate.StreamsEnded), or as a Stop with the gate begins if that is
// first; the drain never waits for it. (A grpc-go client's own client-side health checking
// ends its Watch when the server's GOAWAY arrives; a plain Watch stream,
// or another client's, may not.)
//
// A refused RPC says when to retry, from the gate's RetryAfter, as an HTTP
// refusal's Retry-After does: the trailer grpc-retry-pushback-ms, which
// grpc-go's retry policy waits (gRFC A6: a client with a retryPolicy for
// UNAVAILABLE retries then, not at its own backoff), and a
// google.rpc.RetryInfo in the status's details.
//
// A refused RPC's connection stays open: grpc-go has no way for an
// interceptor to close one connection, as an HTTP refusal's Connection:
// close does (drain.Gate.Admit). A client keeps one connection, and behind
// a Service's virtual IP it stays with the node it was first sent to:
// NOT_SERVING takes the node out of the endpoints for new connections
// only, so every retry comes back here and is refused until the grpc
// step's GracefulStop, at the drain's end. A server behind a Service gives
// itself a keepalive MaxConnectionAge, whose GOAWAY has each client
// connect again (through the Service, to a node still ready) about that
// long after it connected (grpc varies it by a tenth), while the RPCs it
// admitted on the old
// connection run to their end; leave MaxConnectionAgeGrace unset
// (infinite): one shorter than the longest RPC cuts a checkpoint still
// running on an old connection:
//
//	grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: 30 * time.Second})
//
// A server on a Unix socket, or one whose clients dial its pod's own
// address, needs none. A server served through an http.Server's handler
// (grpc.Server.ServeHTTP) has no keepalive of grpc's, nor a GracefulStop
// that waits for its RPCs (it cancels them all at once): it is shut down
// by that http.Server's step, which waits for the RPCs the interceptors
// count (see package drain, "gRPC served through ServeHTTP").
//
// Server reflection (google.golang.org/grpc/reflection) needs no wiring
// either: like health it is never gated nor counted, whatever the
// Classifier says, so that grpcurl resolves an exempt method during the
// drain and the stream a tool keeps open between its requests (grpcurl's
// and grpcui's client does) holds neither the drain's waits nor
// GracefulStop; it ends as a health Watch does, as GracefulStop begins.
//
// Guarantees: a gated RPC arriving after the gate closed never reaches its
// handler; a health RPC always does, and never reports SERVING after the
// gate closed; no health Watch or reflection stream admitted through the
// interceptors holds Stop; Stop returns by its context's deadline plus the time Stop takes to
// close the connections, at most 50 ms more (a connection still in its
// handshake, which holds grpc's Stop until grpc.ConnectionTimeout, does not
// hold it), even while a handler ignores its cancelled context (unless the
// server was made with grpc.WaitForHandlers(true), whose Stop waits for the
// handlers, and then this Stop returns after 50 ms, leaving it running, and
// reports the RPCs cut); and with both interceptors, first in
// their chains, Stop (and Step) fail only when they may have cut an RPC,
// not for a connection with none whose client never answered the GOAWAY,
// and Step stops the server its reserve after the last RPC's handler
// returned, when that is before its deadline (a client that stopped
// reading a response holds GracefulStop, not work).
package draingrpc
