package httpsource

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause answered with an error status whose body was cut (the
// connection closed before its Content-Length: a server restarting, a
// proxy's timeout) was taken for a pause that got no answer, the status
// line read and dropped with the body. Recorded so, the server's next
// answer, 404 for a sandbox its user had deleted, was "gone after a pause
// that got no answer": the server might have gone on with that pause and
// removed the sandbox, so it was counted lost, where the first answer had
// said 404 already. An answer whose status came is that status's answer,
// its body what was read of it. Over loopback, a sandbox deleted by its
// user before the drain, the server's first 404 cut after 13 bytes of its
// body:
//
//	before: failed, lost ("gone after a pause that got no answer")
//	now:    vanished, not lost
func TestAPauseAnswerWhoseBodyWasCutIsItsStatusAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	const notFound = `{"code":404,"message":"sandbox a not found"}`
	var pauses, listings atomic.Int64
	// Each answer says the close that follows it: a client told nothing keeps the
	// connection for its next request, and a pause sent on it as the server closes
	// it gets no answer at all (Post: EOF, not retried), not the cut 404 this test
	// is about (23 of 500 runs beside a loaded machine).
	const head = "Content-Type: application/json\r\nConnection: close\r\n"
	go serveCloseDelimited(ln, func(req *http.Request) string {
		if req.Method == http.MethodGet {
			if listings.Add(1) == 1 { // the drain's listing, made before the user's deletion
				return "HTTP/1.1 200 OK\r\n" + head + "Content-Length: 37\r\n\r\n" + `[{"sandboxID":"a","state":"running"}]`
			}
			return "HTTP/1.1 200 OK\r\n" + head + "Content-Length: 2\r\n\r\n[]"
		}
		answer := "HTTP/1.1 404 Not Found\r\n" + head + "Content-Length: 44\r\n\r\n" + notFound
		if pauses.Add(1) == 1 {
			return answer[:strings.Index(answer, notFound)+13] // {"code":404,"
		}
		return answer
	})
	src, err := New("http://"+ln.Addr().String(), AgentENV())
	require.NoError(t, err)
	p, err := pause.New(src, pause.Config{})
	require.NoError(t, err)

	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})

	e := entry(t, rep, "a")
	assert.Equal(t, pause.Vanished, e.Outcome, e.Error)
	assert.Zero(t, rep.Lost(), e.Error)
	assert.NotContains(t, e.Error, "no answer")
}
