package httpsource

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause answered 2xx whose body was cut (the connection closed
// before its Content-Length: a proxy's timeout, a server restarting right
// after it paused the sandbox) was taken for a pause that got no answer:
// the status line said the server had paused it, but do dropped the
// status with the body ("reading body: unexpected EOF"), which a pause
// never reads (AgentENV's 204 has none; a 200's or a 202's says nothing the
// Source uses). Late in the phase, with no retry left, the sandbox the
// server had paused was failed and counted lost. A 2xx status is now the
// pause's answer, whatever became of its body. In virtual time, over a
// real HTTP/1.1 exchange in memory, a server whose pause takes 12 s:
//
//	0 s    the pass lists a running and sends its pause
//	10 s   the phase deadline: no pause is sent after it
//	12 s   200 OK, the body cut after 14 of its 40 bytes
//	       before: failed, lost ("reading body: unexpected EOF")
//	       now:    preserved, 1 attempt
func TestAPauseAnsweredSuccessWithACutBodyIsPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := pipenet.Listen("sandbox-server.test:80")
		defer ln.Close()
		var paused atomic.Bool // once its pause answered
		go serveCloseDelimited(ln, func(req *http.Request) string {
			if req.Method == http.MethodGet {
				state := "running"
				if paused.Load() {
					state = "paused"
				}
				body := fmt.Sprintf(`[{"id":"a","state":%q}]`, state)
				return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
			time.Sleep(12 * time.Second) // the pause's snapshot
			paused.Store(true)
			const body = `{"id":"a","state":"paused","ok":true}  `
			answer := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return answer[:strings.Index(answer, body)+14] // {"id":"a","st: the connection closes
		})
		src, err := New("http://sandbox-server.test", Config{Client: &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}})
		require.NoError(t, err)
		p, err := pause.New(src, pause.Config{})
		require.NoError(t, err)
		start := time.Now()

		rep := p.Run(ctxWithDeadline(t, 10*time.Second), start.Add(20*time.Second))

		e := entry(t, rep, "a")
		assert.Equal(t, pause.Preserved, e.Outcome, e.Error)
		assert.Equal(t, 1, e.Attempts)
		assert.Zero(t, rep.Lost(), e.Error)
	})
}
