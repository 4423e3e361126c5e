package draingrpc

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/listening"
)

// healthPrefix is the full method prefix of the standard health service.
var healthPrefix = "/" + healthpb.Health_ServiceDesc.ServiceName + "/"

func isHealth(method string) bool { return strings.HasPrefix(method, healthPrefix) }

// notServing returns a health answer with every SERVING turned into
// NOT_SERVING; other statuses (a service unknown to the health server)
// and other messages are returned as they are. The handler's message is
// not modified: a health server may share it.
func notServing(m any) any {
	switch r := m.(type) {
	case *healthpb.HealthCheckResponse:
		if r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}
		}
	case *healthpb.HealthListResponse:
		out := &healthpb.HealthListResponse{Statuses: make(map[string]*healthpb.HealthCheckResponse, len(r.GetStatuses()))}
		for name, st := range r.GetStatuses() {
			out.Statuses[name], _ = notServing(st).(*healthpb.HealthCheckResponse)
		}
		return out
	}
	return m
}

// watchHealth runs a health stream (Watch) ungated. Every status the
// handler sends passes through notServing once the gate is closed, and
// when the gate closes while the stream last said SERVING, the stream is
// sent NOT_SERVING at once: Watch sends only on changes, and the health
// server has not changed. When a Stop with g begins (or has begun), or the
// drain's preserve phase ends (g's StreamsEnded, as a drain.Stream ends),
// the stream ends: the handler's context is cancelled, and the stream's
// status is codes.Unavailable instead of the handler's. Ended only by a
// Stop, a Watch served through an http.Server's ServeHTTP (no Stop: that
// server's HTTP step shuts it down) never ended: the step closed it its
// reserve after the drain's work, and failed for the request it cut, on
// every drain of such a server (docs/faults.md row 1496).
func watchHealth(g *drain.Gate, srv any, ss grpc.ServerStream, h grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ws := &healthStream{ServerStream: ss, ctx: ctx, cancel: cancel, g: g}
	stopping := watchStops(g)
	var ended <-chan struct{} // nil: no gate, never
	if g != nil {
		ended = g.StreamsEnded()
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		draining := g.Draining()
		for {
			select {
			case <-draining:
				ws.drained()
				draining = nil
			case <-stopping:
				ws.stop()
				return
			case <-ended:
				ws.stop()
				return
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	})
	err := h(srv, ws)
	close(done)
	wg.Wait() // no SendMsg after the handler returned
	if ws.stopped() && ss.Context().Err() == nil {
		return errServerStopping
	}
	return err
}

// errServerStopping is the status of a health Watch ended by Stop.
var errServerStopping = status.Error(codes.Unavailable, "server stopping: health Watch ended; watch another server")

// healthStream is a Watch stream whose statuses the gate can override and
// that Stop can end. SendMsg is serialized: the handler, the drain notice
// and the stop all send.
type healthStream struct {
	grpc.ServerStream
	ctx    context.Context // the handler's: cancelled by stop
	cancel context.CancelFunc
	g      *drain.Gate
	mu     sync.Mutex
	sent   bool                                       // a status went out
	last   healthpb.HealthCheckResponse_ServingStatus // the last status sent
	ended  bool                                       // stop ran: nothing more is sent
}

func (s *healthStream) Context() context.Context { return s.ctx }

func (s *healthStream) SendMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errServerStopping
	}
	r, ok := m.(*healthpb.HealthCheckResponse)
	if !ok {
		return s.ServerStream.SendMsg(m)
	}
	if s.g.Closed() {
		r = notServing(r).(*healthpb.HealthCheckResponse)
		if s.sent && r.GetStatus() == s.last {
			return nil // the override already said so
		}
	}
	return s.send(r)
}

// drained tells a stream that last said SERVING that it no longer is.
func (s *healthStream) drained() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notServingLocked()
}

// stop ends the stream because its server stops: a stream that last said
// SERVING is told NOT_SERVING, nothing is sent after it, and the handler's
// context is cancelled.
func (s *healthStream) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notServingLocked()
	s.ended = true
	s.cancel()
}

func (s *healthStream) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *healthStream) notServingLocked() {
	if !s.ended && s.sent && s.last == healthpb.HealthCheckResponse_SERVING {
		_ = s.send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	}
}

func (s *healthStream) send(r *healthpb.HealthCheckResponse) error {
	if err := s.ServerStream.SendMsg(r); err != nil {
		return err
	}
	s.sent, s.last = true, r.GetStatus()
	return nil
}

// states holds, for each gate, what Stop and the interceptors that admit
// through it share. The key is a weak pointer, so a gate's entry goes with
// the gate.
var states sync.Map // weak.Pointer[drain.Gate] -> *gateState

// A gateState is, for one gate, the signal closed while at least one Stop
// with it runs, and the RPCs in its interceptors' handlers.
type gateState struct {
	mu      sync.Mutex
	running int           // Stops running
	ch      chan struct{} // closed while running > 0; made lazily

	// The RPCs in the handlers of the gate's interceptors, on every server
	// made with them, and the cut checks of the Stops past their deadline,
	// which every RPC that reaches a handler joins.
	calls         map[*call]struct{}
	checks        map[*cutCheck]struct{}
	unary, stream atomic.Bool // an interceptor of that kind was made with the gate
	// moved is closed, and cleared, when an RPC reaches or leaves a
	// handler; made by a Step waiting for its reserve (quiet), nil
	// otherwise, so that an RPC closes nothing when none waits.
	moved chan struct{}
}

// A call is one RPC in an interceptor's handler.
type call struct {
	ctx   context.Context // the RPC's own, which its server's Stop cancels
	local net.Addr        // the address its connection came in on (see localAddr); nil when unknown
	done  bool            // its handler returned; guarded by gateState.mu
	cut   bool            // ctx was done when it returned; guarded by gateState.mu
}

// localAddr is the address an RPC's connection came in on, the one its
// server's listener listens on, or nil when it is not known or is not a
// listener of the server's own: an RPC served through an http.Server
// (grpc's ServeHTTP) came in on that server's listener, which grpc's Stop
// does not close.
func localAddr(ctx context.Context) net.Addr {
	if ctx.Value(http.ServerContextKey) != nil {
		return nil
	}
	if p, ok := peer.FromContext(ctx); ok {
		return p.LocalAddr
	}
	return nil
}

// elsewhere reports whether c runs on another server than stopped, whose
// Stop was held: c's context names another *grpc.Server (serverOf). When
// it names none, or stopped is not a *grpc.Server (nil), onOpenListener
// tells.
func (c *call) elsewhere(stopped *grpc.Server) (other, told bool) {
	if stopped == nil {
		return false, false
	}
	if srv := serverOf(c.ctx); srv != nil {
		return srv != stopped, true
	}
	return false, false
}

// onOpenListener reports whether a socket listens on the address c came in
// on, which makes c another server's than the one whose Stop, held, has
// closed every listener of its own (grpc's Stop and GracefulStop close
// them first of all, before any wait). When that cannot be told, c may be
// that server's. Only where the RPC names no server: an address says less
// than that (another process, or a socket of the same SO_REUSEPORT group,
// may listen there; the tables are those of the main thread's network
// namespace; a listener's descriptor closed is not its socket closed when
// another descriptor, systemd's, keeps it). listened keeps what the tables
// said of each address, read once per address, not per call: a server
// with a thousand streams has a handful of addresses, and this runs in
// the step's slack.
func (c *call) onOpenListener(listened map[string]bool) bool {
	if c.local == nil {
		return false
	}
	key := c.local.Network() + " " + c.local.String()
	on, ok := listened[key]
	if !ok {
		listens, known := listening.On(c.local)
		on = listens && known
		listened[key] = on
	}
	return on
}

// A cutCheck is the RPCs one Stop may have cut: in a handler as its
// deadline came, or reaching one since.
type cutCheck struct{ calls []*call }

func stateOf(g *drain.Gate) *gateState {
	k := weak.Make(g)
	if s, ok := states.Load(k); ok {
		return s.(*gateState)
	}
	s, loaded := states.LoadOrStore(k, &gateState{})
	if !loaded {
		runtime.AddCleanup(g, func(k weak.Pointer[drain.Gate]) { states.Delete(k) }, k)
	}
	return s.(*gateState)
}

// intercepting records that an interceptor of g's, a stream one or a unary
// one, was made, and returns the state its calls count their RPCs in (nil
// for a nil g).
func intercepting(g *drain.Gate, stream bool) *gateState {
	if g == nil {
		return nil
	}
	s := stateOf(g)
	if stream {
		s.stream.Store(true)
	} else {
		s.unary.Store(true)
	}
	return s
}

// rpc counts one RPC in an interceptor's handler, ctx its own context,
// until done is called. The first in the process starts learning grpc's
// key (startLearning), which a held Stop tells such RPCs apart by: they
// are what it is needed for, and each ran the process-wide stats handlers
// before it reached the interceptor, as drainkit's own RPC that learns the
// key runs them, so a handler that panics on every RPC has not waited for
// drainkit's to end the process (row 3442).
func (s *gateState) rpc(ctx context.Context) (done func()) {
	if s == nil {
		return func() {}
	}
	startLearning(ctx)
	c := &call{ctx: ctx, local: localAddr(ctx)}
	s.mu.Lock()
	if s.calls == nil {
		s.calls = make(map[*call]struct{})
	}
	s.calls[c] = struct{}{}
	for chk := range s.checks {
		chk.calls = append(chk.calls, c)
	}
	s.move()
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		c.done, c.cut = true, ctx.Err() != nil
		delete(s.calls, c)
		s.move()
	}
}

// move tells the Steps waiting for their reserve (quiet) that an RPC
// reached or left a handler. s.mu is held.
func (s *gateState) move() {
	if s.moved != nil {
		close(s.moved)
		s.moved = nil
	}
}

// quiet returns a channel closed once no RPC has been in the handlers of
// the gate's interceptors for reserve: reserve after the last one
// returned, or after quiet was called when none was in one; an RPC that
// reaches a handler meanwhile is waited for, and the reserve runs again
// from its end. It is never closed when ctx ends first, for a nil s or a
// reserve of zero, nor when the gate's interceptors are not of both kinds
// (an RPC of the other kind would run uncounted).
func (s *gateState) quiet(ctx context.Context, reserve time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	if s == nil || reserve <= 0 || !s.unary.Load() || !s.stream.Load() {
		return ch
	}
	go func() {
		for {
			s.mu.Lock()
			running := len(s.calls)
			if s.moved == nil {
				s.moved = make(chan struct{})
			}
			moved := s.moved
			s.mu.Unlock()
			if running > 0 {
				select {
				case <-moved:
					continue
				case <-ctx.Done():
					return
				}
			}
			t := time.NewTimer(reserve)
			select {
			case <-t.C:
				close(ch)
				return
			case <-moved: // an RPC reached a handler: waited for, then the reserve again
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}()
	return ch
}

// idle returns a function that reports whether a Stop, called after idle,
// cut no RPC in the handlers of the gate's interceptors: none that was in
// one when idle was called, or reached one since, had its context
// cancelled (grpc's Stop cancels those of its server's RPCs as it closes
// their connections) before its handler returned, nor is still running
// with its context cancelled. An RPC of another server made with the same
// gate is not cut by this one's Stop, and is not counted (row 1016). When
// grpc's Stop was held (see Stop), it may not have closed the connections
// yet (a handshake holds it before it does; on a loaded machine it may
// not have run yet): an RPC still running then counts, unless it is
// another server's than stopped, s's *grpc.Server (nil for another
// Server): its context names another (rows 2580 to 2585, 2588, 2589),
// or, where it names none, a socket still listens on the address its
// connection came in on (row 2381). It reports false when the gate's
// interceptors are not of both kinds (an RPC of the other kind would run
// uncounted), and for a nil s. byTables says an RPC's server was told by
// the socket tables, not by its context, and Stop's nil rests on that.
func (s *gateState) idle(stopped *grpc.Server) (still func(held bool) (idle, byTables bool)) {
	if s == nil || !s.unary.Load() || !s.stream.Load() {
		return func(bool) (bool, bool) { return false, false }
	}
	chk := &cutCheck{}
	s.mu.Lock()
	for c := range s.calls {
		chk.calls = append(chk.calls, c)
	}
	if s.checks == nil {
		s.checks = make(map[*cutCheck]struct{})
	}
	s.checks[chk] = struct{}{}
	s.mu.Unlock()
	return func(held bool) (bool, bool) {
		running, cut := s.endCheck(chk)
		if cut {
			return false, false
		}
		if !held {
			return true, false
		}
		return allElsewhere(running, stopped)
	}
}

// allElsewhere reports whether every one of calls runs on another server
// than stopped, whose Stop is held (see call.elsewhere and
// call.onOpenListener), and whether the socket tables told that of one.
func allElsewhere(calls []*call, stopped *grpc.Server) (all, byTables bool) {
	listened := make(map[string]bool)
	for _, c := range calls {
		other, told := c.elsewhere(stopped)
		if !told {
			other, byTables = c.onOpenListener(listened), true
		}
		if !other {
			return false, false
		}
	}
	return true, byTables
}

// endCheck ends chk and returns its RPCs still running with their context
// not cancelled, and whether one of its RPCs was cut: it returned with
// its context cancelled, or runs on with it cancelled. The socket tables
// that tell the running ones' servers apart are read after, without s.mu.
func (s *gateState) endCheck(chk *cutCheck) (running []*call, cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.checks, chk)
	for _, c := range chk.calls {
		switch {
		case c.cut, !c.done && c.ctx.Err() != nil:
			return nil, true
		case !c.done:
			running = append(running, c)
		}
	}
	return running, false
}

// watchStops returns a channel closed when a Stop with g runs: at once if
// one runs now.
func watchStops(g *drain.Gate) <-chan struct{} {
	if g == nil {
		return nil // no Stop names it
	}
	s := stateOf(g)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// stopWatches ends g's health Watches, and those that arrive until end is
// called. A nil g ends nothing.
func stopWatches(g *drain.Gate) (end func()) {
	if g == nil {
		return func() {}
	}
	s := stateOf(g)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running++
	if s.running == 1 {
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		close(s.ch)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.running--; s.running == 0 {
				s.ch = nil // the next Watch waits for the next Stop
			}
		})
	}
}
