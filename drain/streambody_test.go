package drain

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// Fault: an HTTP Stream whose handler reads its request's body as it
// comes (an attach over HTTP: the user's input streamed in the body, the
// output in the response) was not ended when the preserve phase ended: the
// gate cancelled the request's context, but a Body.Read does not watch
// that context, so the handler stayed in it. The server's Shutdown waited
// for it until the http step's deadline, Close cut it there, and the step
// failed ("1 connection(s) still in a request"): exit 1 with every sandbox
// preserved, as row 270 for gRPC. The gate now also ends the stream's body
// reads (its read deadline) as it cancels the context.
func TestAnHTTPAttachReadingItsBodyEndsWithThePreservePhase(t *testing.T) {
	g := &Gate{Exempt: []Class{Stream}} // as the one-call path
	returned := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle("POST /sandboxes/{id}/attach", g.Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex() // the output goes out while the input comes in
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		buf := make([]byte, 512)
		for { // the user's input, to the sandbox
			if _, err := r.Body.Read(buf); err != nil {
				returned <- err
				return
			}
		}
	})))
	d := attach(t, g, mux)
	require.Eventually(t, func() bool { return g.InFlight(Stream) == 1 }, 5*time.Second, time.Millisecond)

	rep := d.Shutdown(context.Background())

	h := rep.Phase("http")
	assert.Equal(t, OK, h.Result, "the attach held the server's Shutdown: %s", h.Error)
	assert.NoError(t, rep.Err())
	select {
	case err := <-returned:
		assert.Error(t, err, "its body read ended")
	default:
		t.Error("the attach's handler had not returned")
	}
	assert.Zero(t, g.InFlight(Stream))
}

// Fault (a review of the gate): row 273's fix set the read deadline of
// every Stream's connection when the preserve phase ended it, to wake a
// handler waiting in Body.Read. A log follow waits in no Body.Read (a GET
// has no body): the deadline woke the server's own background read of the
// HTTP/1.1 connection instead, which net/http takes for the client gone
// and cancels the connection's context with, and the connection, kept
// alive, gave every later request on it a context cancelled before its
// handler began. On loopback, a follow ended by the drain, then a pause of
// the client's sandbox (exempt) on the same connection while the steps
// ran: 3 of 3 failed "context canceled". The deadline is now set only
// while the handler is in a Read of the body, and a Read after the end
// fails at once.
func TestAStreamEndedByTheDrainLeavesItsConnectionServingTheNextRequest(t *testing.T) {
	g := &Gate{Exempt: []Class{Pause, Stream}} // as the one-call path
	following := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("GET /sandboxes/{id}/logs", g.Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "a log line\n")
		http.NewResponseController(w).Flush()
		close(following)
		<-r.Context().Done()
	})))
	mux.Handle("POST /sandboxes/{id}/pause", g.Admit(Pause, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.Context().Err(); err != nil {
			http.Error(w, "pause: "+err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "paused")
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	budget, err := deadline.New(4*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := New(Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })})
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}} // one connection: the follow's
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL + "/sandboxes/sb-0/logs?follow=1")
	require.NoError(t, err)
	<-following
	rep := d.Shutdown(t.Context()) // the preserve phase ends the follow; the server's steps are still to come
	require.NoError(t, rep.Err())
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err, "the follow ended")
	resp.Body.Close()

	for range 3 {
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused = c.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodPost, srv.URL+"/sandboxes/sb-0/pause", nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.True(t, reused, "the follow's connection")
		assert.Equal(t, "paused", string(body))
	}
}

// Fault: an attach whose handler was not in a Read of its body when the
// preserve phase ended it (between two Reads, writing the last input to
// its sandbox, or not yet at its first) returned as it should, its next
// Read failing at once or its context done, but net/http, to reuse the
// connection, then read what was left of the body (up to 256 KiB) before
// the request could end, and the client, attached, sent nothing more: the
// server's Shutdown waited for it to the http step's deadline and the
// step failed, every sandbox preserved. The read deadline was set only for
// a Read that waited. TestAnHTTPAttachReadingItsBodyEndsWithThePreservePhase
// met it on a loaded machine (4 of 40 runs at a load of 15, the handler not
// yet in its Read when the drain ended it); here the handler is between
// Reads by construction.
func TestAnHTTPAttachBetweenTwoReadsEndsWithThePreservePhase(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readMore bool // the handler reads again once ended, or returns at its context's end
	}{
		{"reads again", true},
		{"returns at its context's end", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Gate{Exempt: []Class{Stream}}
			got := make(chan struct{})
			returned := make(chan error, 1)
			mux := http.NewServeMux()
			mux.Handle("POST /sandboxes/{id}/attach", g.Admit(Stream, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				_ = rc.EnableFullDuplex()
				w.WriteHeader(http.StatusOK)
				_ = rc.Flush()
				buf := make([]byte, 512)
				if _, err := r.Body.Read(buf); err != nil {
					returned <- err
					return
				}
				close(got)
				<-r.Context().Done() // the input given to the sandbox, no Read waits
				var err error = context.Cause(r.Context())
				if tc.readMore {
					_, err = r.Body.Read(buf)
				}
				returned <- err
			})))
			d := attach(t, g, mux)
			<-got

			rep := d.Shutdown(context.Background())

			h := rep.Phase("http")
			assert.Equal(t, OK, h.Result, "the attach held the server's Shutdown: %s", h.Error)
			select {
			case err := <-returned:
				assert.ErrorIs(t, err, ErrDraining, "the drain ended it")
			default:
				t.Error("the attach's handler had not returned")
			}
			assert.Zero(t, g.InFlight(Stream))
		})
	}
}

// attach serves mux on loopback to a Drainer with gate g and a 4 s
// budget (its http step ends by 2.5 s), and returns it once an attach to
// sandbox sb-0, its client's input "ls\n" and the body kept open, has its
// answer's 200.
func attach(t *testing.T, g *Gate, mux *http.ServeMux) *Drainer {
	t.Helper()
	srv := &http.Server{Handler: mux}
	budget, err := deadline.New(4*time.Second, deadline.Config{})
	require.NoError(t, err)
	d, err := New(Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []Step{HTTPServerStep("http", srv, time.Second)}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	input, typing := io.Pipe()
	t.Cleanup(func() { _ = typing.Close() })
	req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/sandboxes/sb-0/attach", input)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	go func() { _, _ = typing.Write([]byte("ls\n")) }()
	resp, err := client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return d
}
