package drain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/drainkit/drainkit/internal/drainprogress"
	"github.com/drainkit/drainkit/internal/gaterefusals"
	"github.com/drainkit/drainkit/internal/gatevia"
)

// A Class names a kind of operation the Gate admits, such as creating or
// pausing a sandbox. The Gate counts admitted operations by class.
type Class string

// Classes of operations that sandbox servers have. A server may use its own.
const (
	Create     Class = "create"
	Resume     Class = "resume"
	Fork       Class = "fork"
	Snapshot   Class = "snapshot"
	KeepAlive  Class = "keepalive"
	Pause      Class = "pause"
	Checkpoint Class = "checkpoint"
	Delete     Class = "delete"
	// Stream is a call that lasts as long as its client keeps it open: a
	// log follow, an attach, a watch, a long-poll. Like any class it is
	// rejected once the gate closes unless Exempt (exempt, as on the
	// one-call path, a follow of a sandbox still running on the draining
	// node is served). Unlike the others it is never waited for, since it
	// does not end by itself: neither Wait nor Shutdown's gate wait and
	// preserve phase wait for it. Every stream ends at one moment: when
	// Shutdown's preserve phase ends (the sandboxes it follows are
	// preserved or lost), which closes the channel of StreamsEnded, so
	// that a server's shutdown step never waits for one. A request Admit
	// or Middleware admitted has its context cancelled then (cause
	// ErrDraining), a gRPC one draingrpc's interceptors admitted ends with
	// codes.Unavailable, and the holder of one admitted by Enter ends it
	// itself when StreamsEnded's channel closes. From then on a Stream is
	// refused, exempt or not (Enter's error, the middleware's 503,
	// draingrpc's codes.Unavailable): its client goes to another node
	// instead of reopening it here. A call that starts a sandbox and then
	// streams (a create that attaches) is a Stream that enters the gate
	// again as a Create for its start: Enter(Create) once admitted, leave
	// once the sandbox is listed.
	Stream Class = "stream"
)

// ErrDraining is returned (wrapped) by Gate.Enter for an operation of a
// gated class once the gate is closed: the node is draining and new work
// belongs on another node.
var ErrDraining = errors.New("drain: node is draining, not accepting new work")

// A Gate admits operations until the node starts draining, then rejects new
// operations of gated classes with ErrDraining while exempt classes (the
// ones that move work off the node: pause, checkpoint, delete) still pass.
// It counts admitted operations in flight, so a shutdown can wait for the
// gated ones to finish, and counts every rejection in the metric
// drainkit.drain.gate.rejections (by class, through the MeterProvider of the
// Drainer it is given to, or the global one) and in the Report of the drain
// it is given to (the gate phase's Detail: by way in and class, with the
// first and the last). Both keep the first 32 kinds apart and count the
// later ones under the class "other". It keeps no class none is in flight of, so a
// classify may make a class of each path.
//
// The zero value is an open gate that gates every class. Exempt and
// RetryAfter must be set before the gate is first used and not changed
// after. A Gate is safe for concurrent use and must not be copied after
// first use.
type Gate struct {
	// Exempt lists the classes admitted even after Close, for example
	// []Class{Pause, Checkpoint, Delete}. New refuses a Gate that
	// exempts a class that starts a sandbox (Create, Resume, Fork).
	Exempt []Class
	// RetryAfter is the Retry-After the HTTP middleware sends with its 503
	// (in whole seconds, rounded up), and the wait draingrpc's interceptors
	// ask of a refused RPC's client (the grpc-retry-pushback-ms trailer and
	// a google.rpc.RetryInfo, in milliseconds). Zero means 5 s; New refuses
	// a negative one.
	RetryAfter time.Duration

	mu       sync.Mutex
	closed   bool
	draining chan struct{} // closed by Close; made lazily
	inflight map[Class]int
	gated    int                              // in-flight operations of gated classes, streams apart
	idle     chan struct{}                    // closed when gated drops to 0; nil while gated == 0
	left     chan struct{}                    // closed when any operation leaves, or begins or ends a Write, for waitWhile; nil when none waits
	entries  uint64                           // operations admitted, Streams apart: progress
	writing  int                              // counted operations whose handler is in a Write of its response (countedWriter)
	writes   uint64                           // those Writes that returned: a response's progress
	rejects  metric.Int64Counter              // set by New, or the global provider's at the first rejection
	streams  map[*int]context.CancelCauseFunc // the Middleware's streams in flight, ended by endStreams
	ended    bool                             // endStreams ran: a stream is refused now
	streamsC chan struct{}                    // closed by endStreams; made lazily
	refused  refusedOps                       // the operations refused, for the Report
}

// A way is how an operation came to the gate, for the account of the
// ones it refused.
type way string

const (
	byEnter way = "enter" // Enter, called by the server's own code
	byHTTP  way = "http"  // Admit, Middleware (Server.Admit)
	byGRPC  way = "grpc"  // draingrpc's interceptors
)

func init() {
	gatevia.EnterGRPC = func(g any, c string) (func(), error) { return g.(*Gate).enter(Class(c), byGRPC) }
	gatevia.RetryAfter = func(g any) time.Duration { return g.(*Gate).retryAfter() }
	drainprogress.Set = func(cfg any, fn func(rep any, next string)) {
		cfg.(*Config).progress = func(rep *Report, next string) { fn(rep, next) }
	}
}

// refusedOther is the class that counts the refusals of kinds past
// gaterefusals.MaxKinds, which bounds the kinds (way and class) the
// account of refusals keeps apart.
const refusedOther Class = "other"

// refusedOps is the gate's account of the operations it refused: how many
// of each kind, and when the first and the last were refused.
type refusedOps struct {
	n           int
	kinds       int
	by          map[string]map[string]int // by way, then class: gaterefusals.Detail's By
	first, last time.Time
}

// refusals returns a copy of the gate's account of the operations it
// refused.
func (g *Gate) refusals() refusedOps {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.refused
	r.by = make(map[string]map[string]int, len(g.refused.by))
	for w, m := range g.refused.by {
		r.by[w] = maps.Clone(m)
	}
	return r
}

// add counts one refusal of class c that came by w, now, and returns the
// class it is counted under: c, or refusedOther past MaxKinds kinds.
func (r *refusedOps) add(w way, c Class) Class {
	now := time.Now()
	if r.n == 0 {
		r.first = now
	}
	r.n++
	r.last = now
	if r.by == nil {
		r.by = make(map[string]map[string]int)
	}
	m := r.by[string(w)]
	if m == nil {
		m = make(map[string]int)
		r.by[string(w)] = m
	}
	if _, ok := m[string(c)]; !ok {
		if r.kinds >= gaterefusals.MaxKinds {
			c = refusedOther
		}
		if _, ok := m[string(c)]; !ok {
			r.kinds++
		}
	}
	m[string(c)]++
	return c
}

// setRejects makes the gate count its rejections in c.
func (g *Gate) setRejects(c metric.Int64Counter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rejects = c
}

// rejectedLocked counts one rejection of class c, which came by w: in the
// account and in the metric under the same class, so that a classify that
// makes a class of each path makes no series of each path either.
func (g *Gate) rejectedLocked(c Class, w way) {
	c = g.refused.add(w, c)
	if g.rejects == nil {
		r, err := otel.GetMeterProvider().Meter(scope).Int64Counter(metricRejections, metric.WithUnit("{operation}"),
			metric.WithDescription(rejectionsHelp))
		if err != nil {
			return // the global provider's error handler has it; counting is best effort
		}
		g.rejects = r
	}
	g.rejects.Add(context.Background(), 1, metric.WithAttributes(attribute.String(attrClass, string(c))))
}

// Enter admits one operation of class c. On success it returns a leave
// function that the caller must call when the operation ends; calling it
// more than once has no further effect. Once the gate is closed, Enter
// returns an error wrapping ErrDraining for a gated class and leaves the
// counts unchanged; exempt classes are admitted, except a Stream once
// StreamsEnded's channel is closed. A Stream admitted by Enter is counted
// but never waited for, and the gate cannot end it: its holder must end it
// (and call leave) when StreamsEnded's channel closes (see Stream).
func (g *Gate) Enter(c Class) (leave func(), err error) {
	return g.enter(c, byEnter)
}

// enter is Enter of an operation that came by w.
func (g *Gate) enter(c Class, w way) (leave func(), err error) {
	exempt := slices.Contains(g.Exempt, c)
	waited := !exempt && c != Stream
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == Stream && g.ended {
		g.rejectedLocked(c, w)
		return nil, errStreamRefused
	}
	if g.closed && !exempt {
		g.rejectedLocked(c, w)
		return nil, fmt.Errorf("%w (%s)", ErrDraining, c)
	}
	if g.inflight == nil {
		g.inflight = make(map[Class]int)
	}
	g.inflight[c]++
	if c != Stream {
		g.entries++
	}
	if waited {
		if g.gated == 0 {
			g.idle = make(chan struct{})
		}
		g.gated++
	}
	var once sync.Once
	return func() { once.Do(func() { g.leave(c, waited) }) }, nil
}

func (g *Gate) leave(c Class, waited bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// A class none is in flight of goes: kept at zero, a classify that
	// makes a class of each path (a resume of each sandbox) grew the map
	// with every sandbox the node ever served, and the waits walk it.
	if g.inflight[c]--; g.inflight[c] == 0 {
		delete(g.inflight, c)
	}
	g.wakeLocked()
	if !waited {
		return
	}
	g.gated--
	if g.gated == 0 {
		close(g.idle)
		g.idle = nil
	}
}

// Close closes the gate: from now on operations of gated classes are
// rejected and Draining's channel is closed. Close is idempotent; it reports
// whether this call was the one that closed the gate.
func (g *Gate) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	g.drainingLocked()
	close(g.draining)
	return true
}

// Closed reports whether Close has been called.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Draining returns a channel that is closed when the gate closes, like the
// lifecycle signals of k8s.io/apiserver: code that must react to the start
// of the drain selects on it instead of polling.
func (g *Gate) Draining() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.drainingLocked()
}

func (g *Gate) drainingLocked() chan struct{} {
	if g.draining == nil {
		g.draining = make(chan struct{})
	}
	return g.draining
}

// InFlight returns how many operations of class c are admitted and not yet
// left.
func (g *Gate) InFlight(c Class) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight[c]
}

// gatedInFlight returns, by class, how many operations of the gated
// classes among cs are in flight; nil when none is.
func (g *Gate) gatedInFlight(cs []Class) map[Class]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var m map[Class]int
	for _, c := range cs {
		if n := g.inflight[c]; n > 0 && !slices.Contains(g.Exempt, c) {
			if m == nil {
				m = make(map[Class]int)
			}
			m[c] = n
		}
	}
	return m
}

// waitClasses blocks until no operation of the gated classes among cs is
// in flight, or ctx is done, in which case it returns ctx.Err().
func (g *Gate) waitClasses(ctx context.Context, cs []Class) error {
	return g.waitWhile(ctx, func() bool {
		for _, c := range cs {
			if g.inflight[c] > 0 && !slices.Contains(g.Exempt, c) {
				return true
			}
		}
		return false
	})
}

// waitNoneWorking blocks until no operation the gate counts (exempt ones
// included, Streams apart: they end with the preserve phase) is in flight
// but in a Write of its response (inWrite), which waits for its client, or
// ctx is done, in which case it returns ctx.Err().
func (g *Gate) waitNoneWorking(ctx context.Context) error {
	return g.waitWhile(ctx, func() bool {
		n := 0
		for c, in := range g.inflight {
			if c != Stream {
				n += in
			}
		}
		return n > g.writing
	})
}

// gateProgress is what the gate saw of its counted operations so far:
// the same at two times says that none entered between and no Write of a
// response returned.
type gateProgress struct {
	entries uint64 // operations admitted, Streams apart
	writes  uint64 // Writes of their responses that returned
	writing int    // Writes in flight now
}

// progress returns what the gate saw of its counted operations so far.
func (g *Gate) progress() gateProgress {
	g.mu.Lock()
	defer g.mu.Unlock()
	return gateProgress{entries: g.entries, writes: g.writes, writing: g.writing}
}

// inWrite runs fn, a Write or a Flush of the response of an operation the
// gate counts, as one in a Write meanwhile: the HTTP step waits for such
// an operation, but not for a Write its client does not read
// (boundUncounted).
func (g *Gate) inWrite(fn func()) {
	g.mu.Lock()
	g.writing++
	g.wakeLocked()
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.writing--
		g.writes++
		g.wakeLocked()
	}()
	fn()
}

// wakeLocked wakes waitWhile's waiters: an operation left, or began or
// ended a Write.
func (g *Gate) wakeLocked() {
	if g.left != nil {
		close(g.left)
		g.left = nil
	}
}

// waitWhile blocks until busy, called under g.mu, is false, or ctx is
// done, in which case it returns ctx.Err().
func (g *Gate) waitWhile(ctx context.Context, busy func() bool) error {
	for {
		g.mu.Lock()
		if !busy() {
			g.mu.Unlock()
			return nil
		}
		if g.left == nil {
			g.left = make(chan struct{})
		}
		left := g.left
		g.mu.Unlock()
		select {
		case <-left:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Wait blocks until no operation of a gated class is in flight, or ctx is
// done, in which case it returns ctx.Err(). Exempt operations are not waited
// for: they keep being admitted while draining, so waiting for them might
// never end; nor are streams (Stream), which last as long as their
// clients keep them. Wait is meant to be called after Close; before it, new gated
// operations can start while Wait waits.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	idle := g.idle
	g.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errStreamEnded is the cause with which endStreams cancels a stream's
// request context.
var errStreamEnded = fmt.Errorf("%w: the sandboxes are preserved, the server is shutting down (stream ended)", ErrDraining)

// errStreamRefused is the error of a stream refused once endStreams ran.
var errStreamRefused = fmt.Errorf("%w (%s): the sandboxes are preserved, the server is shutting down", ErrDraining, Stream)

// addStream registers cancel, the context of a stream the Middleware
// admitted, and returns its unregister function. Once endStreams ran it
// registers nothing, counts a rejection and returns errStreamRefused: a
// stream admitted then would end at once, and its client, seeing a normal
// end, would open it again here.
func (g *Gate) addStream(cancel context.CancelCauseFunc) (remove func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		g.rejectedLocked(Stream, byHTTP)
		return nil, errStreamRefused
	}
	if g.streams == nil {
		g.streams = make(map[*int]context.CancelCauseFunc)
	}
	key := new(int)
	g.streams[key] = cancel
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.streams, key)
	}, nil
}

// StreamsEnded returns a channel that is closed when every Stream the gate
// admitted must end: when Shutdown's preserve phase ends, the sandboxes the
// streams follow preserved or lost, before the first step. From then on
// Enter refuses a Stream, exempt or not. The holder of a Stream admitted by
// Enter selects on it and ends the stream (and calls leave) when it
// closes; Admit, Middleware and draingrpc's interceptors end theirs
// themselves. It never closes for a gate no Drainer's Shutdown runs with.
func (g *Gate) StreamsEnded() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.streamsEndedLocked()
}

func (g *Gate) streamsEndedLocked() chan struct{} {
	if g.streamsC == nil {
		g.streamsC = make(chan struct{})
	}
	return g.streamsC
}

// endStreams cancels the context of every stream the Middleware admitted,
// closes StreamsEnded's channel, and has the gate refuse every stream from
// now on (an exempt Stream too): Shutdown calls it once the preserve phase
// ended, so that the server's shutdown step does not wait for calls that
// never end by themselves. Only its first call does anything.
func (g *Gate) endStreams() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended {
		return
	}
	g.ended = true
	close(g.streamsEndedLocked())
	for key, cancel := range g.streams {
		cancel(errStreamEnded)
		delete(g.streams, key)
	}
}
