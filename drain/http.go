package drain

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/bounded"
)

// defaultRetryAfter is the Retry-After a Gate's HTTP middleware sends when
// Gate.RetryAfter is zero.
const defaultRetryAfter = 5 * time.Second

// Admit returns a handler that admits each request to h as one operation of
// class c. While the gate is closed and c is gated, it answers
// 503 Service Unavailable with a Retry-After header instead of calling h,
// and closes the connection after it (Connection: close; a GOAWAY over
// HTTP/2, once the connection's other requests are done): a client behind
// a Service keeps its connection with the node it was sent to, and only a
// new one goes to a node still ready.
// An admitted request counts as in flight until h returns, and the gate
// sees its handler's Writes of the response, in pieces of 16 KiB: an HTTP
// step does not wait past its reserve for one whose client stopped
// reading it (see HTTPServerStep). A handler that
// starts its sandbox in the background and returns first (202 Accepted)
// must have the Lister list that sandbox from then on, booting or not, or
// keep the operation in flight until it runs (Enter, and leave once
// running), or a drain can miss it. A request of class Stream is not
// waited for, and its context is cancelled when Shutdown's preserve phase
// ends (see Stream): a handler that streams until its client leaves must
// return when r.Context() ends. A read of its body waiting for the client
// (an attach's input) then fails too (its read deadline is set, where the
// ResponseWriter supports it), and so does every later one, so a handler
// that returns when Body.Read fails ends as it should; once it returned,
// what is left of its body is not waited for either, whether a Read was
// waiting when the stream ended or not; the connection of one that read
// nothing then (a log follow) serves its next request. So does a Write
// (or Flush) of its response waiting for a client that stopped reading
// (its write deadline is set then; its connection is not reused), and
// every later one fails at once, so that a follow's handler returns. A
// Stream's ResponseWriter is the gate's: http.ResponseController reaches
// the server's through its Unwrap. A Stream that comes once the preserve phase
// ended, exempt or not, is answered the 503 of a refusal: what it would
// follow is preserved and the server is about to stop, so its client
// should go to another node rather than reopen it here. A nil h panics
// here, as http.Handle does, not at the first request.
func (g *Gate) Admit(c Class, h http.Handler) http.Handler {
	return g.Middleware(func(*http.Request) Class { return c })(h)
}

// Middleware returns HTTP middleware that classifies each request with
// classify and admits it through the gate like Admit.
func (g *Gate) Middleware(classify func(*http.Request) Class) func(http.Handler) http.Handler {
	if classify == nil {
		panic("drain: Gate.Middleware: nil classify")
	}
	return func(h http.Handler) http.Handler {
		if h == nil {
			// As http.Handle does: at start, not at the first request.
			panic("drain: Gate.Admit or Middleware: nil handler")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := classify(r)
			leave, err := g.enter(c, byHTTP)
			if err == nil && c == Stream {
				ctx, cancel := context.WithCancelCause(r.Context())
				defer cancel(nil)
				live := r.Body != nil && r.Body != http.NoBody
				body := &streamBody{ReadCloser: r.Body, rc: http.NewResponseController(w), live: live}
				end := func(cause error) {
					cancel(cause)
					body.end()
				}
				var remove func()
				if remove, err = g.addStream(end); err == nil {
					defer remove()
					r = r.WithContext(ctx)
					if live {
						r.Body = body
					}
					w = &streamWriter{serverWriter: serverWriter{w}, body: body}
					defer body.finish()
				} else {
					leave()
				}
			}
			if err != nil {
				w.Header().Set("Retry-After", retryAfterSeconds(g.retryAfter()))
				// Its retry must open a new connection: one kept open
				// (keep-alive, HTTP/2) stays with this node, which a
				// Service no longer sends new ones to, and would be
				// refused again until the server shuts down. Go's HTTP/2
				// server sends a GOAWAY for it.
				w.Header().Set("Connection", "close")
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			defer leave()
			if c != Stream {
				w = &countedWriter{serverWriter: serverWriter{w}, g: g}
			}
			h.ServeHTTP(w, r)
		})
	}
}

// writeChunk is the most of a response a counted operation's Write hands
// net/http at once: each piece that returns is progress the gate sees, so
// that a large response sent to a client that reads it is told from one
// whose client stopped reading. A client that takes in less than a piece
// in the HTTP step's reserve (64 KiB/s at NewServer's least, 250 ms; 22
// KiB/s at its 30 s grace's 750 ms) counts as one that stopped. 16 KiB is
// a TLS record's most, which net/http over TLS writes apart anyway.
const writeChunk = 16 << 10

// countedWriter is the ResponseWriter of an operation the middleware
// admitted and the gate counts (a Stream's is streamWriter): its Writes
// and Flushes, in pieces of writeChunk, run in Gate.inWrite. A Write waits
// for its client once the socket's buffers are full, and does not watch
// the request's context: a response whose client stopped reading (a
// suspended process, a stalled proxy) held the HTTP step, which waits for
// the operations the gate counts, to its deadline (docs/faults.md row
// 2181). ReadFrom keeps net/http's sendfile, a piece at a time; Unwrap
// gives http.ResponseController the server's writer; Flush, Hijack and
// Push keep what a handler asserts (http.Flusher, http.Hijacker,
// http.Pusher, the deprecated http.CloseNotifier) working.
type countedWriter struct {
	serverWriter
	g *Gate
}

func (w *countedWriter) Write(p []byte) (n int, err error) {
	for { // once for an empty p: a Write(nil) sends the header
		piece := p[:min(len(p), writeChunk)]
		var m int
		w.g.inWrite(func() { m, err = w.ResponseWriter.Write(piece) })
		n += m
		if err == nil && m < len(piece) {
			err = io.ErrShortWrite
		}
		p = p[len(piece):]
		if err != nil || len(p) == 0 {
			return n, err
		}
	}
}

// ReadFrom copies src to the response as net/http's does (sendfile from a
// file), a writeChunk at a time, or through Write where the server's
// writer has no ReadFrom. net's sendfile looks for the file one
// *io.LimitedReader deep: a src that is one (io.CopyN's, as
// http.ServeContent and ServeFile send a file) gives its pieces over its
// R, its N kept, where a LimitReader around it hid the file and every
// byte was copied through user space (docs/faults.md row 2260).
func (w *countedWriter) ReadFrom(src io.Reader) (n int64, err error) {
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{w}, src) // Write's pieces, not this ReadFrom again
	}
	r, left := src, int64(math.MaxInt64)
	if lr, ok := src.(*io.LimitedReader); ok {
		r, left = lr.R, lr.N
		defer func() { lr.N = left }()
	}
	for left > 0 {
		piece := &io.LimitedReader{R: r, N: min(left, writeChunk)}
		want := piece.N
		var m int64
		w.g.inWrite(func() { m, err = rf.ReadFrom(piece) })
		n, left = n+m, left-m
		if err != nil || m < want { // short of a piece: src ended
			return n, err
		}
	}
	return n, nil
}

// Flush flushes the response.
func (w *countedWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController's Flush).
func (w *countedWriter) FlushError() (err error) {
	w.g.inWrite(func() { err = http.NewResponseController(w.ResponseWriter).Flush() })
	return err
}

// Push is the server's HTTP/2 push, where it has one; elsewhere it
// returns http.ErrNotSupported, as a server's Push does for a client that
// disabled push.
func (w *countedWriter) Push(target string, opts *http.PushOptions) error {
	if p, ok := w.ResponseWriter.(http.Pusher); ok {
		return p.Push(target, opts)
	}
	return http.ErrNotSupported
}

// streamBody is the request body of a Stream the middleware admitted,
// whose Reads its end wakes. A Body.Read does not watch the request's
// context: a handler waiting in one for its client's next input (an
// attach) would hold the server's Shutdown to its deadline. The read
// deadline wakes it (not where the ResponseWriter does not support it: a
// wrapper without Unwrap), but only while the body is not read to its end:
// set on an HTTP/1.1 connection whose body is (a log follow, whose GET has
// none, or a body read to its end), it woke the server's own background
// read of the connection, which net/http takes for the client gone, and
// the connection, kept alive, served every later request with its context
// already cancelled (row 1012). It is set while a Read waits, and once the
// handler of an ended stream returned: net/http then reads what is left of
// the body (up to 256 KiB) to reuse the connection, and an attached client
// sends nothing more, so a handler that was between two Reads when its
// stream ended held the Shutdown as one in a Read did (row 1152).
type streamBody struct {
	io.ReadCloser
	rc *http.ResponseController

	mu       sync.Mutex
	live     bool // the request's body, not read to its end: no background read runs
	reading  int  // Reads in flight
	writing  int  // the response's Writes and Flushes in flight (streamWriter)
	ended    bool // end ran: every Read and Write fails
	finished bool // the handler returned: net/http reads the rest of the body next
}

// Read is the body's Read, or errStreamEnded once the stream ended.
func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return 0, errStreamEnded
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading--
	if err == io.EOF {
		b.live = false // net/http's background read starts now
	}
	if err != nil && b.ended {
		err = errStreamEnded // the deadline end set, not the client
	}
	return n, err
}

// end fails every Read and Write from now on, and wakes those waiting.
// A Write waits for its client once the socket's buffers are full (a
// follow whose client stopped reading: a suspended terminal, a stalled
// proxy), and does not watch the request's context either: it held the
// server's Shutdown until the step cut the connection and failed
// (docs/faults.md row 1841). Its write deadline is set only while one is
// in flight: set on a stream that ended between two Writes, it failed
// net/http's last flush, and a client reading to the end saw the response
// cut instead of its clean end.
func (b *streamBody) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	b.cutLocked()
	if b.writing > 0 {
		_ = b.rc.SetWriteDeadline(time.Now())
	}
}

// write runs fn, a Write or a Flush of the response, unless the stream
// ended, counted as in flight so that end can wake it; it reports whether
// fn ran.
func (b *streamBody) write(fn func()) bool {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return false
	}
	b.writing++
	b.mu.Unlock()
	fn()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writing--
	return true
}

// endedNow reports whether end ran.
func (b *streamBody) endedNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

// streamWriter is the ResponseWriter of a Stream the middleware admitted,
// whose Writes its end wakes (streamBody.end). Writes and Flushes once the
// stream ended fail (errStreamEnded) or do nothing: the stream's client may
// have stopped reading, and the handler is to return. Unwrap gives
// http.ResponseController the server's own writer; Flush and Hijack keep
// what a handler asserts (http.Flusher, http.Hijacker, the deprecated
// http.CloseNotifier) working.
type streamWriter struct {
	serverWriter
	body *streamBody
}

func (w *streamWriter) Write(p []byte) (n int, err error) {
	if !w.body.write(func() { n, err = w.ResponseWriter.Write(p) }) {
		return 0, errStreamEnded
	}
	if err != nil && w.body.endedNow() {
		err = errStreamEnded // the deadline end set, not the client
	}
	return n, err
}

// Flush flushes the response, unless the stream ended.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController's Flush):
// errStreamEnded once the stream ended.
func (w *streamWriter) FlushError() (err error) {
	if !w.body.write(func() { err = http.NewResponseController(w.ResponseWriter).Flush() }) {
		return errStreamEnded
	}
	if err != nil && w.body.endedNow() {
		err = errStreamEnded
	}
	return err
}

// serverWriter is the server's ResponseWriter as the middleware's writers
// (countedWriter, streamWriter) embed it, with what a handler asserts of
// it that they pass on unchanged.
type serverWriter struct{ http.ResponseWriter }

// Hijack is the server's Hijack, where it has one (HTTP/1.x).
func (w serverWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// CloseNotify is the server's, for a handler that still asserts the
// deprecated http.CloseNotifier (net/http's writers have it); nil, which
// never fires, where the server's writer has none.
func (w serverWriter) CloseNotify() <-chan bool {
	if cn, ok := w.ResponseWriter.(interface{ CloseNotify() <-chan bool }); ok {
		return cn.CloseNotify()
	}
	return nil
}

// Unwrap returns the server's ResponseWriter, for http.ResponseController.
func (w serverWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish is called as the handler returns: the rest of the body of an
// ended stream is not waited for.
func (b *streamBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.finished = true
	b.cutLocked()
}

// cutLocked sets the read deadline when the stream ended and something
// reads the live body: a Read of the handler, or, once the handler
// returned, net/http's read of what is left.
func (b *streamBody) cutLocked() {
	if b.ended && b.live && (b.reading > 0 || b.finished) {
		_ = b.rc.SetReadDeadline(time.Now())
	}
}

// retryAfter is the wait a refusal asks of its client: RetryAfter, or
// defaultRetryAfter when it is zero (or negative, in a gate New never saw).
func (g *Gate) retryAfter() time.Duration {
	if g.RetryAfter <= 0 {
		return defaultRetryAfter
	}
	return g.RetryAfter
}

// retryAfterSeconds is d, positive, in the whole seconds of a Retry-After.
func retryAfterSeconds(d time.Duration) string {
	secs := d / time.Second // round up: 0.5 s is 1, never 0
	if d%time.Second != 0 { // not d + 1s - 1ns first: that wraps round near the largest Duration
		secs++
	}
	return strconv.FormatInt(int64(secs), 10)
}

// Readiness returns a readiness-probe handler: 503 Service Unavailable from
// the moment the gate closes, so the pod's endpoints stop receiving new work
// at once; before that it defers to check, or answers 200 "ok" when check is
// nil. Liveness must not use it: a draining node is alive.
func (g *Gate) Readiness(check http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.Closed() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		if check != nil {
			check.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
}

// ShutdownHTTP shuts srv down within ctx: it calls srv.Shutdown(ctx), which
// closes the listeners and waits for active requests to finish, and when ctx
// ends first it calls srv.Close, which closes every remaining connection.
// Neither closes, nor waits for, a hijacked connection (a WebSocket, an
// attach's raw stream), as net/http says: its handler must end it, when
// the function it gave srv.RegisterOnShutdown is called, or, admitted as a
// Stream by the gate's Admit or Middleware, when its request's context
// ends with the preserve phase (see Stream). It returns the error of
// Shutdown, or nil if srv was already closed, and an error saying so when
// srv is nil.
func ShutdownHTTP(ctx context.Context, srv *http.Server) error {
	return shutdownHTTP(ctx, srv, func(err error) error { return err })
}

// shutdownHTTP is ShutdownHTTP, whose error from Shutdown goes through
// failed before srv is closed (while the connections it left are open).
func shutdownHTTP(ctx context.Context, srv *http.Server, failed func(error) error) error {
	if srv == nil {
		return errors.New("drain: ShutdownHTTP: srv is nil: no server to shut down")
	}
	err := srv.Shutdown(ctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	if err != nil {
		err = failed(err)
		_ = srv.Close()
	}
	return err
}

// HTTPServerStep returns a teardown Step that runs ShutdownHTTP on srv with
// the step's context: Shutdown, then Close at the step's deadline (a
// hijacked connection is its handler's to end: see ShutdownHTTP), or,
// run by a Drainer, reserve after the last operation its gate counts
// (exempt ones included, Streams apart) ended, when that is earlier (a
// zero reserve sets no such bound): a
// request still served then is none the gate knows of (an ungated call,
// or a gRPC stream served through ServeHTTP, such as a load balancer's
// health Watch, which never ends by itself), and waiting for it to the
// deadline held the process, and the pod, up to the whole grace. An
// operation whose handler, admitted by Admit or Middleware, is in a Write
// of its response counts as ended while the Write makes no progress: a
// client that stopped reading (or takes in less than 16 KiB in the
// reserve) has its connection closed then, and the step fails saying so,
// where it waited to its deadline. When the
// deadline or that bound comes first, its error says how many connections were still in
// a request: it counts them through srv.ConnState, which it wraps (a
// ConnState set on srv before HTTPServerStep is still called; one set after
// replaces the count, and the error then says only that the deadline came).
// When no connection was in a request then, closing cuts nothing, and the
// step is ok: Shutdown waited for connections that had sent none yet
// (net/http waits for such a connection, a TCP check's, a preconnect's,
// until it is 5 s old; the step's Detail says how many it closed), or had
// not looked again since the last request ended (it looks at a doubling
// interval, up to every 500 ms).
// Call it before srv serves, as the wiring in the package doc does: the
// server reads ConnState as it accepts each connection, and a write to it
// once serving is a data race.
func HTTPServerStep(name string, srv *http.Server, reserve time.Duration) Step {
	return httpStep(name, srv, deadline.Fixed(reserve))
}

// httpStep is HTTPServerStep with a reserve of any kind (NewServer's
// follows the grace in use). A nil srv makes a step New refuses, naming it:
// at SIGTERM it could only fail.
func httpStep(name string, srv *http.Server, reserve deadline.Reserve) Step {
	phase := deadline.Phase{Name: name, Reserve: reserve}
	if srv == nil {
		return noServerStep{phase}
	}
	conns := countConns(srv)
	return NewStep(phase, func(ctx context.Context) (any, error) {
		sctx, stop := boundUncounted(ctx, reserve)
		defer stop()
		var detail any
		err := shutdownHTTP(sctx, srv, func(err error) error {
			n, silent, known := conns()
			switch {
			case known && n == 0 && sctx.Err() != nil:
				// No connection is in a request at the deadline (or the
				// bound): Close cuts nothing, as draingrpc.Stop's does for
				// a connection still in its handshake. Shutdown waited for
				// connections that have sent nothing (net/http waits for
				// one until it is 5 s old: docs/faults.md row 1840), or
				// had not looked since the last request ended (it looks at
				// a doubling interval, up to every 500 ms: row 1842). Any
				// other error of Shutdown's (a listener that failed to
				// close) is the step's, as ShutdownHTTP's (row 2060).
				if silent > 0 {
					detail = fmt.Sprintf("closed %d connection(s) that had sent no request (a TCP check, a preconnect, a TLS handshake left unfinished): no request was cut", silent)
				}
				return nil
			case n > 0 && ctx.Err() != nil:
				return fmt.Errorf("%w: %d connection(s) still in a request at the step's deadline, closed now: "+
					"a request the gate does not wait for (a log follow, a watch, an ungated call) held the shutdown; "+
					"one that lasts as long as its client is admitted as a drain.Stream, which ends with the preserve phase", err, n)
			case n > 0 && errors.As(context.Cause(sctx), new(stalledResponses)):
				return fmt.Errorf("%d connection(s) still in a request when %w, closed now: "+
					"each handler's Write fails, its response cut", n, context.Cause(sctx))
			case n > 0 && sctx.Err() != nil:
				return fmt.Errorf("%d connection(s) still in a request %w, closed now: "+
					"a request the gate does not count (a gRPC stream served through ServeHTTP, such as a health Watch; a log follow; an ungated call); "+
					"one that lasts as long as its client is admitted as a drain.Stream, which ends with the preserve phase", n, context.Cause(sctx))
			}
			return err
		})
		return detail, err
	})
}

// boundUncounted returns ctx cut, once no operation the Drainer's gate
// counts is in flight (Streams apart), reserve later, when none entered
// the gate meanwhile; one that did (an exempt delete of a request that
// checkpointed first) is waited for, and the reserve runs again from its
// end (docs/faults.md row 1490): what the server
// still serves then is no operation of the drain's (a gRPC stream served
// through ServeHTTP, such as a load balancer's health Watch, which never
// ends by itself), and waiting for it to the step's deadline held the
// process, and the pod, until then, however early the work was over.
// An operation whose handler is in a Write of its response counts as
// over while no Write returns: its client stopped reading, and its
// response is cut with the rest, the cause a stalledResponses (row 2181).
// The reserve is time the process was seen to run (internal/bounded's
// slack), not wall time: a process frozen inside it (a container at its
// CPU quota, a loaded node) ran again with the reserve out and a handler's
// next operation due too, and cut a request whose next operation the
// process had not yet run to see (row 3022).
// Without the gate (a Step run by hand) or a reserve, ctx is left alone.
func boundUncounted(ctx context.Context, reserve deadline.Reserve) (context.Context, context.CancelFunc) {
	g := gateOf(ctx)
	if g == nil || reserve == nil || reserve() <= 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			if g.waitNoneWorking(ctx) != nil {
				return
			}
			seen := g.progress()
			r := reserve()
			if _, ended := bounded.Within(ctx.Done(), r); ended {
				return
			}
			if g.progress() != seen { // one entered, or a Write returned: the reserve runs again
				continue
			}
			if seen.writing > 0 {
				cancel(stalledResponses{n: seen.writing, reserve: r})
			} else {
				cancel(fmt.Errorf("%v after the last operation the gate counted ended (the step's reserve)", r))
			}
			return
		}
	}()
	return ctx, func() { cancel(nil) }
}

// stalledResponses is the cause with which boundUncounted cuts the step
// when the operations the gate still counts are all in a Write of their
// responses, none of which returned for the step's reserve.
type stalledResponses struct {
	n       int
	reserve time.Duration
}

func (e stalledResponses) Error() string {
	return fmt.Sprintf("the response(s) of %d operation(s) the gate counts made no progress for %v (the step's reserve): "+
		"their clients stopped reading (a suspended process, a stalled proxy)", e.n, e.reserve)
}

// gateKey is the context key of the Drainer's gate in a step's context.
type gateKey struct{}

// withGate returns ctx carrying g, for the steps that shut servers down
// (boundUncounted).
func withGate(ctx context.Context, g *Gate) context.Context {
	return context.WithValue(ctx, gateKey{}, g)
}

// gateOf returns the gate withGate put in ctx, or nil.
func gateOf(ctx context.Context) *Gate {
	g, _ := ctx.Value(gateKey{}).(*Gate)
	return g
}

// noServerStep is HTTPServerStep's step of no server: New refuses it
// (check), and its Run says why.
type noServerStep struct{ phase deadline.Phase }

func (s noServerStep) Phase() deadline.Phase { return s.phase }

func (s noServerStep) Run(ctx context.Context) (any, error) { return nil, ShutdownHTTP(ctx, nil) }

func (s noServerStep) check() error {
	return errors.New("HTTPServerStep: srv is nil: no server to shut down")
}

// countConns wraps srv.ConnState to count the connections in a request
// (http.StateActive) and those that have sent none yet (http.StateNew:
// connected, or in their TLS handshake), and returns the counts as they
// are when called, and whether they are still counted: a ConnState set on
// srv after it replaces the count.
func countConns(srv *http.Server) func() (active, silent int, known bool) {
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	prev := srv.ConnState
	count := func(c net.Conn, st http.ConnState) {
		mu.Lock()
		if st == http.StateActive || st == http.StateNew {
			states[c] = st
		} else {
			delete(states, c)
		}
		mu.Unlock()
		if prev != nil {
			prev(c, st)
		}
	}
	srv.ConnState = count
	return func() (active, silent int, known bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, st := range states {
			if st == http.StateActive {
				active++
			} else {
				silent++
			}
		}
		return active, silent, reflect.ValueOf(srv.ConnState).Pointer() == reflect.ValueOf(count).Pointer()
	}
}
