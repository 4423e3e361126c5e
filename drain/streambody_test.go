package drain

import (
	"context"
	"io"
	"net"
	"net/http"
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
	srv := &http.Server{Handler: mux}
	budget, err := deadline.New(4*time.Second, deadline.Config{}) // the http step ends by 2.5 s
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
	defer typing.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/sandboxes/sb-0/attach", input)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	go func() { _, _ = typing.Write([]byte("ls\n")) }()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
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
