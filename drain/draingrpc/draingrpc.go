package draingrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/bounded"
	"github.com/drainkit/drainkit/internal/gatevia"
)

// A Classifier maps a gRPC full method name ("/pkg.Service/Method") to the
// operation class the gate admits it as.
type Classifier func(fullMethod string) drain.Class

// Methods returns a Classifier from a table of full method names
// ("/package.Service/Method", as the generated _FullMethodName constants
// spell them); methods not in it get class def. A key that is no full
// method name (its leading slash forgotten, its service or method left
// out) panics here, when the server is built: no RPC would ever match it,
// and its method would get def unnoticed until the node drains (an exempt
// Checkpoint refused as a Create). A well-formed name of a method the
// server does not have cannot be told from here: prefer the constants.
func Methods(table map[string]drain.Class, def drain.Class) Classifier {
	for m := range table {
		if !fullMethod(m) {
			panic(fmt.Sprintf("draingrpc: Methods: %q is not a full method name (\"/package.Service/Method\", as the generated _FullMethodName constants spell it): "+
				"no RPC would match it, and its method would get the default class", m))
		}
	}
	return func(m string) drain.Class {
		if c, ok := table[m]; ok {
			return c
		}
		return def
	}
}

// fullMethod reports whether m is a gRPC full method name,
// "/service/method", neither part empty nor holding a slash.
func fullMethod(m string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return strings.HasPrefix(m, "/") && ok && service != "" && method != "" && !strings.Contains(method, "/")
}

// UnaryServerInterceptor admits every unary RPC through g as one operation
// of the class classify gives its method. While the gate is closed and the
// class is gated it answers codes.Unavailable ("node draining: ...") without
// calling the handler, with the wait the gate's RetryAfter asks (as the HTTP
// refusal's Retry-After: 5 s when zero; here in milliseconds, rounded up)
// in both of gRPC's retry hints: the trailer grpc-retry-pushback-ms, which
// a grpc-go client's retry policy waits in place of its backoff (gRFC A6),
// and a google.rpc.RetryInfo in the status's details, for clients that
// read those. An admitted RPC counts as in flight until its handler
// returns. The refusal leaves the connection open (grpc-go lets no
// handler or interceptor close one): a client retries on another node only
// over a new connection, which a client behind a Service's virtual IP makes
// only once its connection ends. Give such a server a keepalive
// MaxConnectionAge (see the package doc).
//
// The health service (grpc.health.v1.Health: Check, List) is never gated,
// whatever classify says, and once the gate is closed every SERVING it
// answers becomes NOT_SERVING: load balancers and gRPC readiness probes
// stop sending work at once, without the server flipping its health
// server itself.
//
// A unary RPC of class drain.Stream (a long-poll) ends as a streaming one
// does (see StreamServerInterceptor): its handler's context is cancelled
// and it answers codes.Unavailable, "server stopping: ...".
//
// A nil g or classify panics here, when the server is built, as
// http.Handle does for a nil handler: the interceptor would otherwise
// panic in every RPC, which gRPC does not recover.
func UnaryServerInterceptor(g *drain.Gate, classify Classifier) grpc.UnaryServerInterceptor {
	mustHave(g, classify, "UnaryServerInterceptor")
	st := intercepting(g, false)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer st.rpc(ctx)()
		if isHealth(info.FullMethod) {
			resp, err := h(ctx, req)
			if err == nil && g.Closed() {
				resp = notServing(resp)
			}
			return resp, err
		}
		c := classify(info.FullMethod)
		leave, err := enter(g, c, info.FullMethod, func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) })
		if err != nil {
			return nil, err
		}
		defer leave()
		if c != drain.Stream {
			return h(ctx, req)
		}
		ctx, _, stopped, end := untilStop(g, ctx)
		resp, err := h(ctx, req)
		if end(); stopped() {
			return nil, errStreamStopping
		}
		return resp, err
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming RPCs: a
// stream counts as in flight until its handler returns, and a refused one
// carries the same retry hints. The health
// service's Watch is never gated; a Watch open when the gate closes
// receives NOT_SERVING at once, and no SERVING after it. A Watch is not
// work but never ends by itself (its handler returns only when the stream
// does), so it would hold the server's GracefulStop: while Stop (or Step)
// runs with the same gate, every Watch admitted here ends, after a final
// NOT_SERVING where it last said SERVING, with codes.Unavailable ("server
// stopping: ..."), and a Watch that arrives meanwhile ends the same way at
// once. The health service's Watch handler must return when its stream's
// context ends, as google.golang.org/grpc/health's does.
//
// The server reflection service (grpc.reflection.v1 and v1alpha) is never
// gated nor counted either, whatever classify says: it is no work, and a
// tool keeps its stream open between requests. Its streams end as health
// Watches do, with codes.Unavailable once a Stop with g begins, although
// its handler waits in RecvMsg.
//
// A stream of class drain.Stream (a log follow, an attach, a watch of
// your own) is never waited for by the drain, and never by Stop either.
// It ends when the gate's streams end (g.StreamsEnded: the drain's
// preserve phase ended), as an HTTP one the gate admitted does, or as a
// Stop with the same gate begins if that comes first (a Stop without a
// drain): its handler's context is cancelled and its status is
// codes.Unavailable, "server stopping: ...", so that GracefulStop waits
// only for the work RPCs. One that arrives after the gate's streams ended
// is refused (codes.Unavailable, its handler not called), exempt or not.
// Its handler must return when its stream's context ends; one waiting in
// RecvMsg for its client (an attach reading the user's input), or in
// SendMsg for a client that stopped reading (a follow's suspended
// terminal: HTTP/2's flow control), returns then too, with that same
// status, so a handler that returns when RecvMsg or SendMsg fails ends as
// it should. It must not read the message of that failed RecvMsg, nor
// change the one of that failed SendMsg: the receive or the send goes on
// until the stream ends (grpc then still holds what it queued of the
// send, and GracefulStop its connection, until Stop).
//
// A nil g or classify panics here, as for UnaryServerInterceptor.
func StreamServerInterceptor(g *drain.Gate, classify Classifier) grpc.StreamServerInterceptor {
	mustHave(g, classify, "StreamServerInterceptor")
	st := intercepting(g, true)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer st.rpc(ss.Context())()
		if isHealth(info.FullMethod) {
			return watchHealth(g, srv, ss, h)
		}
		if isReflection(info.FullMethod) {
			return serveReflection(g, srv, ss, h)
		}
		c := classify(info.FullMethod)
		leave, err := enter(g, c, info.FullMethod, ss.SetTrailer)
		if err != nil {
			return err
		}
		defer leave()
		if c == drain.Stream {
			return stream(g, srv, ss, h)
		}
		return h(srv, ss)
	}
}

// mustHave panics, naming the constructor and the argument, when g or
// classify is nil.
func mustHave(g *drain.Gate, classify Classifier, name string) {
	switch {
	case g == nil:
		panic("draingrpc: " + name + ": nil *drain.Gate (a zero drain.Gate{} is an open gate)")
	case classify == nil:
		panic("draingrpc: " + name + ": nil Classifier (draingrpc.Methods builds one)")
	}
}

// enter admits an RPC of method, class c, through g, or returns the
// status of its refusal, whose retry hint goes out in the trailer that
// setTrailer sets.
func enter(g *drain.Gate, c drain.Class, method string, setTrailer func(metadata.MD)) (func(), error) {
	leave, err := gatevia.EnterGRPC(g, string(c))
	if err != nil {
		wait := retryWait(gatevia.RetryAfter(g))
		setTrailer(metadata.Pairs(pushbackKey, strconv.FormatInt(wait.Milliseconds(), 10)))
		return nil, refusal(method, wait)
	}
	return leave, nil
}

// pushbackKey is the trailer by which a server tells a client's retry
// policy when to retry (gRFC A6): grpc-go waits its milliseconds, in place
// of the policy's backoff, for a trailers-only answer, which a refusal is.
const pushbackKey = "grpc-retry-pushback-ms"

// maxPushback is the longest wait a refusal asks for: grpc-go reads the
// pushback as an int, and one it cannot read (past 2^31-1 ms, some 24
// days, where int is 32 bits) stops the retry at once.
const maxPushback = math.MaxInt32 * time.Millisecond

// retryWait is d, Gate.RetryAfter or its default, in whole milliseconds,
// rounded up (a wait of 0 is a retry at once), and at most maxPushback.
func retryWait(d time.Duration) time.Duration {
	if d >= maxPushback {
		return maxPushback
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// refusal is the status of an RPC of method the gate refused: retry
// elsewhere, or here after wait, which a google.rpc.RetryInfo in its
// details says as well as the trailer, for a client that reads the
// status's details rather than a retry policy (Google APIs' clients,
// e2b-style orchestrators).
func refusal(method string, wait time.Duration) error {
	st := status.Newf(codes.Unavailable, "node draining: not accepting new work (%s): retry on another node", method)
	if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = detailed // err: RetryInfo did not marshal; the trailer still says it
	}
	return st.Err()
}

// errStreamStopping is the status of a drain.Stream that Stop ended.
var errStreamStopping = status.Error(codes.Unavailable, "server stopping: stream ended; open it again on another server")

// stream runs h on ss, a drain.Stream, with a context cancelled, and a
// RecvMsg that returns, when g's streams end or a Stop with g begins (or
// either has); the stream then ends with errStreamStopping, whatever the
// handler returned.
func stream(g *drain.Gate, srv any, ss grpc.ServerStream, h grpc.StreamHandler) error {
	ctx, halt, stopped, end := untilStop(g, ss.Context())
	err := h(srv, &ctxStream{ServerStream: ss, ctx: ctx, halt: halt})
	if end(); stopped() {
		return errStreamStopping
	}
	return err
}

// untilStop returns a context of parent's that is also cancelled when g's
// streams end (g.StreamsEnded) or a Stop with g begins (or either has),
// for the handler of a drain.Stream, and halt, a channel closed just
// before that cancellation (and only for it). Once the handler has
// returned, the caller calls end, and then stopped reports whether the
// drain or Stop ended the call (and not its client).
func untilStop(g *drain.Gate, parent context.Context) (ctx context.Context, halt <-chan struct{}, stopped func() bool, end func()) {
	ctx, cancel := context.WithCancel(parent)
	stopping, ended := watchStops(g), g.StreamsEnded()
	halted := make(chan struct{})
	var byStop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-stopping:
		case <-ended:
		case <-ctx.Done():
			return
		}
		byStop.Store(true)
		close(halted)
		cancel()
	})
	end = func() {
		cancel()
		wg.Wait()
	}
	return ctx, halted, func() bool { return byStop.Load() && parent.Err() == nil }, end
}

// ctxStream is a drain.Stream's ServerStream: the context of its handler,
// and a RecvMsg and a SendMsg that the stream's end wakes. grpc's own
// watch the stream's context, not the handler's, so a handler waiting in
// RecvMsg for its client's next message (an attach reading the user's
// input), or in SendMsg for a client that stopped reading (HTTP/2's flow
// control: a follow's suspended terminal, docs/faults.md row 1843), would
// not return when the streams end: GracefulStop would wait for it until
// the step's deadline, and Stop then cut the work RPCs with it.
type ctxStream struct {
	grpc.ServerStream
	ctx    context.Context
	halt   <-chan struct{} // closed when the drain or a Stop ends the stream
	halted atomic.Bool     // a RecvMsg or SendMsg returned for halt: no other may start
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// RecvMsg returns the next message, or errStreamStopping once the stream
// is ended by the drain or a Stop. The stream's own RecvMsg then goes on
// in its goroutine until the stream ends, which it does as soon as the
// handler returned (grpc cancels a finished stream's receive), and it may
// still write into m: after errStreamStopping the handler must not read
// m, and every later RecvMsg returns errStreamStopping at once, so that no
// two receives run together.
func (s *ctxStream) RecvMsg(m any) error {
	return s.untilHalt(func() error { return s.ServerStream.RecvMsg(m) })
}

// SendMsg sends m, or returns errStreamStopping once the stream is ended by
// the drain or a Stop. The stream's own SendMsg then goes on in its
// goroutine until the stream ends, as RecvMsg's does (it may still encode
// m: after errStreamStopping the handler must not change m), and every
// later SendMsg returns errStreamStopping at once.
func (s *ctxStream) SendMsg(m any) error {
	return s.untilHalt(func() error { return s.ServerStream.SendMsg(m) })
}

// untilHalt runs op, a receive or a send of the stream, in a goroutine of
// its own and returns its error, or errStreamStopping once halt is closed:
// at once, without running op, when it was before.
func (s *ctxStream) untilHalt(op func() error) error {
	if s.halted.Load() {
		return errStreamStopping
	}
	select {
	case <-s.halt:
		s.halted.Store(true)
		return errStreamStopping
	default:
	}
	done := goOp(op)
	select {
	case r := <-done:
		return r.get()
	case <-s.halt:
		s.halted.Store(true)
		return errStreamStopping
	}
}

// opResult is what a stream's receive or send, run by goOp, did.
type opResult struct {
	err      error
	panicked any // op's panic, for get to raise again
}

// goOp runs op, a receive or a send through the streams of the
// interceptors outside ours (a user's wrapper, a codec), in a goroutine
// of its own, so that the drain can end a handler waiting in it, and
// returns its result. A panic in op is handed back, not raised there:
// on that goroutine no recover of the handler's (a recovery interceptor,
// where grpc-go has none) could catch it, and it ended the process. One
// that comes after the drain ended the wait is dropped with the result.
func goOp(op func() error) <-chan opResult {
	done := make(chan opResult, 1) // op's goroutine never blocks on a wait that ended
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- opResult{panicked: v}
			}
		}()
		done <- opResult{err: op()}
	}()
	return done
}

// get returns the op's error, or raises its panic again on the caller's
// goroutine, the handler's.
func (r opResult) get() error {
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
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
// Stop returned when Stop had to be called, unless that Stop cut no RPC:
// when no RPC in the handlers of g's interceptors as ctx ended, or
// reaching them until Stop returned, had its context cancelled by that
// Stop (or by its client meanwhile: Stop cannot tell) (another server's RPC on the same gate is not s's: servers that
// share g do not share this count), GracefulStop was waiting for
// connections alone (a client's that never acknowledged the GOAWAY, for
// which grpc waits 5 s: its node gone without closing it, its process
// frozen), and Stop returns nil. When grpc's Stop was left running (below)
// it may have closed no connection yet, and every RPC still running
// counts, unless it is another server's: its context names another
// *grpc.Server than s (grpc-go puts the server of each RPC there), or,
// where that cannot be told (s is not a *grpc.Server, or a grpc that no
// longer says), a socket still listens on the address its connection came
// in on (Linux's socket tables tell: a *grpc.Server closes every listener
// of its own as GracefulStop begins; an address is a weaker sign, which
// another process, a socket of the same SO_REUSEPORT group, or systemd's
// descriptor of the socket keeps listening). It
// can tell only when interceptors of both kinds, unary and stream, were
// made with g (an RPC of the other kind
// would run uncounted), and it counts an RPC from the moment it reaches
// g's interceptor, so put them first in their chains. (GracefulStop alone
// has no deadline: one stuck RPC would hold the process until SIGKILL.)
//
// g is the gate s's interceptors admit through. As GracefulStop begins,
// Stop ends the health Watch and reflection streams those interceptors
// admitted, and their streams of class drain.Stream still open (see
// StreamServerInterceptor: in a drain they ended with its preserve phase,
// before any step): each
// lasts as long as its client keeps it, and a load balancer or a client that watches without grpc-go's
// client-side health checking (which ends its Watch at the GOAWAY) would
// otherwise hold GracefulStop until ctx ends, and Stop would cut the work
// RPCs too. Only work RPCs are waited for. Watches that arrive while Stop
// runs end at once; after Stop returned, g's Watches are left alone again.
// Servers that share g share this: Stop on one ends the health Watches
// admitted on all of them. A nil g ends no Watch.
//
// A *grpc.Server's GracefulStop waits for every handler to return, even
// after Stop closed the connections: a handler that ignores its cancelled
// context keeps GracefulStop, in a goroutine of its own, running until it
// returns, and Stop does not wait for it (its RPC has ended for the
// client). Nor does this Stop wait long for grpc's Stop: it waits a moment
// (50 ms) after ctx ends and then returns, leaving it running, for grpc's
// Stop can wait far longer than a step has. A server made with
// grpc.WaitForHandlers(true) has it wait for the handlers, and a
// connection still in its handshake (a client that connected and sent
// nothing, or part of the HTTP/2 preface) holds it as it holds
// GracefulStop, until the server's connection timeout
// (grpc.ConnectionTimeout, 120 s unless set); such a connection has no RPC
// to cut, and the process's exit ends it. Make the server with a
// ConnectionTimeout shorter than the step's reserve and GracefulStop ends
// by itself.
//
// Where grpc names an RPC's server is learned once per process, as the
// first RPC that interceptors made with any gate admit begins, from an RPC
// of drainkit's own, "/drainkit.draingrpc.Probe/LearnServerKey", served by
// a grpc.Server of its own, which runs no interceptor, on a loopback TCP
// connection that gives grpc the addresses (and the RPC the :authority)
// of that first RPC: grpc logs that server at INFO ("Server created"),
// and a process-wide stats handler (grpc's observability packages) counts
// that connection and that RPC, and runs on them as on every one of the
// program's, which it has run on for that first RPC, before it reached
// those interceptors (a handler that panics on every RPC ends the process
// at the program's first, not at drainkit's). No Stop waits for that RPC: one that a
// process-wide stats handler holds before it is answered (a synchronous
// export to a collector that does not answer, as the RPC begins) leaves
// the RPCs of a held grpc Stop to be told by the socket tables, as the
// Step's detail says (one it holds at the RPC's End, once answered, does
// not: the key is known by then), and the learning gives that RPC 10 s,
// then ends without the key, its connection closed and its server
// stopped. A learning that fails (a
// grpc-go that no longer names the server, a process-wide stats handler
// that hides it or holds its RPC 10 s, no loopback to serve on) is logged once, as it
// ends, at WARN through slog.Default, with its cause and what to do; one
// still running when a held Stop's RPCs were told by the socket tables
// is logged so once, at that Stop.
//
// A nil s (or a nil *grpc.Server in it) is not called: Stop returns an
// error saying so.
func Stop(ctx context.Context, s Server, g *drain.Gate) error {
	_, err := stop(ctx, s, g, 0)
	return err
}

// stopReturn is how long Stop waits for grpc's Stop after its deadline,
// of the time the process ran (bounded.Within: a process frozen inside
// it does not take a Stop that returned in time for held, row 2941).
// Closing connections takes microseconds; what takes longer is a wait
// Stop must not make: for a connection still in its handshake, until
// grpc.ConnectionTimeout (120 s unless set), which got the step abandoned
// by the drain (a fault) and left the process running towards SIGKILL. It
// is below drain's slack for a step's return, so the step's own result is
// reported.
const stopReturn = 50 * time.Millisecond

// How a Stop went, for a Step's detail.
type stopNotes struct {
	held     bool // grpc's Stop was left running
	quiet    bool // grpc's Stop was called reserve after the last RPC, before the deadline
	byTables bool // held, and its nil rests on the socket tables (see gateState.idle)
}

// stop is Stop, which also calls grpc's Stop, before ctx ends, once no RPC
// has been in the handlers of g's interceptors for reserve (none when
// zero: see gateState.quiet).
func stop(ctx context.Context, s Server, g *drain.Gate, reserve time.Duration) (n stopNotes, err error) {
	if s == nil || reflect.ValueOf(s).Kind() == reflect.Pointer && reflect.ValueOf(s).IsNil() {
		return n, errors.New("draingrpc: the Server is nil: no server to stop")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.GracefulStop()
	}()
	end := stopWatches(g)
	defer end()
	// grpc's key is learned from the first RPC g's interceptors admitted
	// (gateState.rpc), not here: not waited for, since only a held Stop
	// reads it and a process-wide stats handler may hold its RPC, which
	// held every Stop, an idle server's too, to its deadline (row 3300).
	gs, _ := s.(*grpc.Server) // nil for another Server: its RPCs cannot name it
	var st *gateState
	if g != nil {
		st = stateOf(g)
	}
	qctx, unquiet := context.WithCancel(ctx)
	defer unquiet()
	select {
	case <-done:
		return n, nil
	case <-ctx.Done():
	case <-st.quiet(qctx, reserve):
		n.quiet = true
	}
	idle := st.idle(gs)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Stop()
	}()
	_, returned := bounded.Within(stopped, stopReturn)
	n.held = !returned
	none, byTables := idle(n.held)
	n.byTables = byTables
	if byTables && gs != nil {
		warnLearningHeld() // the tables told where grpc's key could have
	}
	switch {
	case none:
		return n, nil // GracefulStop waited for connections only: Stop cut no RPC
	case n.quiet:
		return n, errors.New("RPCs reached their handlers as the step's reserve after the last one ran out; stopped them")
	}
	return n, ctx.Err()
}

// heldStop is a Step's detail when grpc's Stop had not returned shortly
// after the step's deadline (see Stop) and was left running.
const heldStop = "grpc's Stop did not return after the deadline, left running: a connection still in its handshake holds it until grpc.ConnectionTimeout (120 s unless set), with grpc.WaitForHandlers(true) a running handler does, and a loaded machine or a connection slow to close delays it"

// tablesTold is a held Step's detail when the socket tables, not grpc,
// said the RPCs still running were another server's: an address is a
// weaker sign than the *grpc.Server grpc names in each RPC's context, and
// the Report says what the step's nil rests on.
const tablesTold = "the RPCs still running were told from the server's own by the socket tables (a socket listening on the address each came in on), not by grpc, whose contexts named no *grpc.Server (a Server that is not one, a grpc-go that no longer names it, or a process-wide server option, grpc's AddGlobalServerOptions, whose stats handler hid where grpc names it in drainkit's own RPC that learns it, or held that RPC past the deadline): " +
	"another process's, SO_REUSEPORT group's or network namespace's socket on that address makes an RPC the server's Stop cut read as another server's"

// quietStop is a Step's detail when it called grpc's Stop its reserve
// after the last RPC ended, before its deadline.
const quietStop = "GracefulStop still waited %v after the last RPC's handler returned (the step's reserve): " +
	"a response its client has not read (HTTP/2's flow control: a client that stopped reading), or a connection that did not close; Stop closed them, no handler running"

// Step returns a drain teardown Step that runs Stop on s and g with the
// step's context: GracefulStop, ending g's health Watches, then Stop at the
// step's deadline, or reserve after the last RPC in the handlers of g's
// interceptors returned, when that is earlier (an RPC that reaches one
// meanwhile is waited for, and the reserve runs again from its end). What
// GracefulStop still waits for then is no RPC's work but a connection:
// one whose client stopped reading a response its handler queued (grpc
// holds it, and GracefulStop the connection, until the client reads it),
// which held the step, and the process and its pod, to the deadline, up
// to the whole grace, as an HTTP step was held before its own reserve's
// bound (see drain.HTTPServerStep); Stop then cuts no handler, the step is
// ok, and its detail says so. The bound needs both interceptors made with
// g, first in their chains, as Stop's count of cut RPCs does; without them
// (or with a zero reserve) the step waits to its deadline. g is the gate of
// s's interceptors (drain.Config.Gate). When grpc's Stop was left running
// (see Stop), the step's detail in the Report says so, and says too when
// it told the RPCs still running from s's own by the socket tables, not
// by the *grpc.Server in their contexts (s is not a *grpc.Server, or a
// grpc-go that no longer names it there).
func Step(name string, s Server, g *drain.Gate, reserve time.Duration) drain.Step {
	return drain.NewStep(deadline.Phase{Name: name, Reserve: deadline.Fixed(reserve)}, func(ctx context.Context) (any, error) {
		n, err := stop(ctx, s, g, reserve)
		var notes []string
		if n.quiet {
			notes = append(notes, fmt.Sprintf(quietStop, reserve))
		}
		if n.held {
			notes = append(notes, heldStop)
		}
		if n.byTables {
			notes = append(notes, tablesTold)
		}
		var detail any
		if len(notes) > 0 {
			detail = strings.Join(notes, "; ")
		}
		if err != nil && !n.quiet { // ctx's error: Stop had to cut RPCs
			err = errors.Join(errors.New("RPCs still running at the deadline; stopped them"), err)
		}
		return detail, err
	})
}
