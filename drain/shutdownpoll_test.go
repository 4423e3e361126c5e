package drain

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
)

// net/http's Shutdown looks at its connections at a doubling interval, up
// to every 500 ms: one whose request ended just after a look is seen
// closed only at the next. The HTTP step's reserve (250 ms here, NewServer's
// least) can run out in between, and its Close then cuts nothing: no
// connection is in a request. The step is ok. Fault (row 1842): it failed
// with a bare "context canceled", the Report's error and exit 1, whenever
// an operation the gate counts (an exempt delete) ended in the step and
// Shutdown's next look came more than the reserve after. In virtual time,
// a real net/http server over in-memory connections:
//
//	0 s       SIGTERM; a delete is in flight (exempt: it runs on)
//	          the http step begins: Shutdown looks at 1, 3, 7 ... 511 ms, then every 500 ms
//	1.2 s     the delete ends: 204, its connection closed (Shutdown's last look was at ~1.01-1.11 s)
//	1.45 s    the reserve after it runs out: Close, no connection in a request; the step ok
//	~1.51 s   Shutdown's next look, which would have found nothing left
func TestHTTPStepIsNotFailedByTheGapBetweenShutdownsLooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{Exempt: []Class{Delete}}
		mux := http.NewServeMux()
		mux.Handle("DELETE /sandboxes/{id}", g.Admit(Delete, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(1200 * time.Millisecond) // the delete's work
			w.WriteHeader(http.StatusNoContent)
		})))
		srv := &http.Server{Handler: mux}
		d := drainServing(t, g, srv, 60*time.Second)
		ln := pipenet.Listen("pipe")
		go func() { _ = srv.Serve(ln) }()
		client := &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}
		deleted := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodDelete, "http://pipe/sandboxes/sb-0", nil)
			resp, err := client.Do(req)
			if err != nil {
				deleted <- 0
				return
			}
			_ = resp.Body.Close()
			deleted <- resp.StatusCode
		}()
		synctest.Wait()
		require.Equal(t, 1, g.InFlight(Delete), "the delete is in flight")
		start := time.Now()

		rep := d.Shutdown(context.Background())

		assert.Equal(t, http.StatusNoContent, <-deleted, "the delete ran to its end")
		p := rep.Phase("http")
		require.NotNil(t, p)
		assert.Equal(t, OK, p.Result, p.Error)
		assert.NoError(t, rep.Err())
		assert.Equal(t, 1450*time.Millisecond, p.End.Sub(start), "the reserve after the delete's end")
	})
}
