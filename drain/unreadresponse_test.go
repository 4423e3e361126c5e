package drain

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// An exempt operation runs on through the shutdown, and the HTTP step waits
// for what its gate counts: a checkpoint whose handler sends the image back
// as its response. Its client stopped reading it (a suspended process, a
// stalled proxy): the handler waits in a Write that makes no progress, and
// a Write does not watch the request's context. Fault (row 2181): the step
// waited for it to its deadline, the budget's, and the process, and the
// pod, with it; then it closed the connection and failed blaming "a
// request the gate does not wait for". The step now waits for such a
// Write its reserve, as for a request the gate does not count, then
// closes the connection, and says why. In virtual time, a real net/http
// server over in-memory connections (which hold no byte a client does not
// read), grace 60 s:
//
//	0 s      the checkpoint's handler writes its 64 MiB image; its client reads the headers, then nothing
//	0 s      SIGTERM: no sandbox to preserve; the http step begins (reserve 250 ms)
//	0.25 s   the step closes the connection: the Write fails, the handler returns
//	         before: 55 s, the budget's deadline
func TestHTTPStepDoesNotWaitToItsDeadlineForAResponseItsClientStoppedReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		image := bytes.Repeat([]byte("x"), 64<<20)
		d, g, resp, wrote := checkpointOverPipes(t, image)
		defer resp.Body.Close() // and read nothing of it
		synctest.Wait()
		require.Equal(t, 1, g.InFlight(Checkpoint), "the checkpoint's handler is in its Write")
		start := time.Now()

		rep := d.Shutdown(context.Background())

		p := rep.Phase("http")
		require.NotNil(t, p)
		t.Logf("the http step ended at %v: %s %s", p.End.Sub(start), p.Result, p.Error)
		assert.Equal(t, 250*time.Millisecond, p.End.Sub(start), "the reserve after the Write stalled")
		assert.Error(t, <-wrote, "the handler's Write failed as its connection closed")
		assert.Contains(t, p.Error, "stopped reading")
		_, _ = io.Copy(io.Discard, resp.Body)
	})
}

// The other side of row 2181: a response its client reads, however
// slowly, is progress, and the step waits for it as for any operation the
// gate counts. In virtual time, over in-memory connections, grace 60 s:
// a checkpoint's 1 MiB image in one Write, its client reading 16 KiB every
// 150 ms (9.6 s in all; 107 KiB/s, the least a client may read at with the
// step's 250 ms reserve is 64 KiB/s) from before SIGTERM to its end.
func TestHTTPStepWaitsForAResponseItsClientReadsSlowly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		image := bytes.Repeat([]byte("x"), 1<<20)
		d, _, resp, wrote := checkpointOverPipes(t, image)
		defer resp.Body.Close()
		read := make(chan int, 1)
		go func() {
			n, buf := 0, make([]byte, 16<<10)
			for {
				time.Sleep(150 * time.Millisecond) // the client's pace
				m, err := io.ReadFull(resp.Body, buf)
				n += m
				if err != nil {
					read <- n
					return
				}
			}
		}()
		synctest.Wait()
		start := time.Now()

		rep := d.Shutdown(context.Background())

		p := rep.Phase("http")
		require.NotNil(t, p)
		assert.Equal(t, OK, p.Result, p.Error)
		assert.NoError(t, <-wrote)
		assert.Equal(t, len(image), <-read, "the client read the whole image")
		assert.Less(t, p.End.Sub(start), 55*time.Second, "before the step's deadline")
	})
}

// checkpointOverPipes serves, over in-memory connections, a checkpoint
// (exempt) whose handler sends image as its response in one Write, and
// makes its POST; the Drainer's grace is 60 s, its http step's reserve
// 250 ms. It returns the Drainer, its gate, the response, whose body the
// caller reads, and the error of the handler's Write, once it returned.
func checkpointOverPipes(t *testing.T, image []byte) (*Drainer, *Gate, *http.Response, <-chan error) {
	t.Helper()
	g := &Gate{Exempt: []Class{Checkpoint}}
	wrote := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle("POST /sandboxes/{id}/checkpoint", g.Admit(Checkpoint, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := w.Write(image)
		wrote <- err
	})))
	srv := &http.Server{Handler: mux}
	d := drainServing(t, g, srv, 60*time.Second)
	ln := pipenet.Listen("pipe")
	go func() { _ = srv.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}
	resp, err := client.Post("http://pipe/sandboxes/sb-0/checkpoint", "", nil)
	require.NoError(t, err)
	return d, g, resp, wrote
}

// drainServing is the Drainer of a node with no sandboxes whose gate is g
// and whose one step is srv's HTTP step, its reserve 250 ms, the grace of
// its budget grace.
func drainServing(t *testing.T, g *Gate, srv *http.Server, grace time.Duration) *Drainer {
	t.Helper()
	budget, err := deadline.New(grace, deadline.Config{})
	require.NoError(t, err)
	d, err := New(Config{Budget: budget, Gate: g,
		Sandboxes: pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }),
		Steps:     []Step{HTTPServerStep("http", srv, 250*time.Millisecond)}})
	require.NoError(t, err)
	return d
}

// Row 2181 on loopback, for a handler that sends a file with io.Copy,
// which net/http does with sendfile (the gate's writer keeps its ReadFrom,
// a piece at a time): a checkpoint's 64 MiB image file, its client a raw
// TCP connection with a 4 KiB receive buffer that reads nothing, grace
// 10 s, reserve 250 ms. Before, the step ended at its deadline, 8.5 s
// after SIGTERM. A client that reads gets the file whole.
func TestHTTPStepCutsASentFileItsClientStoppedReadingOnLoopback(t *testing.T) {
	image := filepath.Join(t.TempDir(), "image")
	content := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	require.NoError(t, os.WriteFile(image, content, 0o600))
	g := &Gate{Exempt: []Class{Checkpoint}}
	copied := make(chan error, 2)
	sending := make(chan struct{}, 2)
	mux := http.NewServeMux()
	mux.Handle("GET /sandboxes/{id}/image", g.Admit(Checkpoint, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(image)
		if err != nil {
			copied <- err
			return
		}
		defer f.Close()
		sending <- struct{}{}
		_, err = io.Copy(w, f)
		copied <- err
	})))
	srv := &http.Server{Handler: mux}
	d := drainServing(t, g, srv, 10*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/sandboxes/sb-0/image")
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.NoError(t, <-copied)
	<-sending
	assert.True(t, bytes.Equal(content, got), "the file, read whole: %d of %d bytes", len(got), len(content))

	stalled, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer stalled.Close()
	require.NoError(t, stalled.(*net.TCPConn).SetReadBuffer(4096))
	_, err = fmt.Fprint(stalled, "GET /sandboxes/sb-0/image HTTP/1.1\r\nHost: sandboxd\r\n\r\n")
	require.NoError(t, err)
	<-sending // and the client reads nothing
	start := time.Now()

	rep := d.Shutdown(context.Background())

	p := rep.Phase("http")
	require.NotNil(t, p)
	t.Logf("the http step ended %v after SIGTERM: %s %s", p.End.Sub(start), p.Result, p.Error)
	assert.Equal(t, Failed, p.Result)
	assert.Contains(t, p.Error, "stopped reading", "not the step's deadline")
	assert.Error(t, <-copied, "the handler's copy failed as its connection closed")
}

// The ResponseWriter a counted operation's handler gets (row 2181's, whose
// Writes the gate sees) keeps what a handler asserts of net/http's:
// Flusher, Hijacker, io.ReaderFrom, Pusher, the deprecated CloseNotifier,
// and http.ResponseController's methods through Unwrap; its Write(nil)
// still sends the header. On loopback, HTTP/1.1.
func TestACountedOperationsResponseWriterKeepsWhatHandlersAssert(t *testing.T) {
	g := &Gate{}
	type asserted struct{ flusher, hijacker, readerFrom, pusher, closeNotifier, fullDuplex bool }
	got := make(chan asserted, 1)
	srv := httptest.NewServer(g.Admit(Delete, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a asserted
		_, a.flusher = w.(http.Flusher)
		_, a.hijacker = w.(http.Hijacker)
		_, a.readerFrom = w.(io.ReaderFrom)
		_, a.pusher = w.(http.Pusher)
		_, a.closeNotifier = w.(interface{ CloseNotify() <-chan bool })
		a.fullDuplex = http.NewResponseController(w).EnableFullDuplex() == nil
		w.Header().Set("X-Deleted", "sb-0")
		_, _ = w.Write(nil)
		got <- a
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, "sb-0", resp.Header.Get("X-Deleted"))
	assert.Equal(t, asserted{flusher: true, hijacker: true, readerFrom: true, pusher: true, closeNotifier: true, fullDuplex: true}, <-got)
}
