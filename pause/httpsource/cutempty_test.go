package httpsource

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: a listing answered 200 whose body the close delimits (HTTP/1, no
// Content-Length, not chunked: an HTTP/1.0 proxy in front of the server)
// and whose connection closed before its first body byte was read as an
// empty answer, which row 2164 keeps permanent (a path that answers 200
// with nothing is not a listing): the Preserver listed no more, its Report
// Unknown, no sandbox preserved, where the next listing answered whole.
// Such an answer cannot be told from a cut one: nothing said where its body
// ends but the close. An empty body whose end was said (Content-Length: 0,
// chunked's last chunk) can, and stays permanent. Over loopback, the first
// listing cut so, then whole, 2 sandboxes:
//
//	close-delimited, cut before its body: before, Unknown, 0 preserved;
//	                                      now listed again, 2 of 2 preserved
//	Content-Length: 0, chunked's last chunk alone: permanent, as before
func TestAListingCutBeforeItsBodyIsListedAgainWhereAnEmptyOneSaidSoIsNot(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	t.Run("close-delimited, cut before its body", func(t *testing.T) {
		src, listings, pauses := cutFirstListing(t, head+"Connection: close\r\n\r\n")
		_, err := src.List(t.Context())
		require.Error(t, err)
		assert.False(t, isPermanent(err), "its close may have cut it: %v", err)
		assert.Contains(t, err.Error(), "ended with its connection before its first byte")
		preservesBothAfterACutListing(t, src, listings, pauses)
	})
	t.Run("HTTP/1.0, cut before its body", func(t *testing.T) {
		src, listings, pauses := cutFirstListing(t, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
		_, err := src.List(t.Context())
		require.Error(t, err)
		assert.False(t, isPermanent(err), "its close may have cut it: %v", err)
		preservesBothAfterACutListing(t, src, listings, pauses)
	})
	for name, empty := range map[string]string{
		"Content-Length: 0":       head + "Content-Length: 0\r\n\r\n",
		"chunked, its last chunk": head + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			src, _, _ := cutFirstListing(t, empty)
			_, err := src.List(t.Context())
			require.Error(t, err)
			assert.True(t, isPermanent(err), "an empty answer whose end was said is no listing: %v", err)
		})
	}
}

// cutFirstListing serves 2 running sandboxes over loopback, its first
// listing answered first (whatever it is), the next ones whole, and returns
// an AgentENV Source for it and the listings and pauses counted.
func cutFirstListing(t *testing.T, first string) (*Source, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var listings, pauses atomic.Int64
	var paused sync.Map // sandboxID: true once its pause was answered
	go serveCloseDelimited(ln, func(req *http.Request) string {
		if req.Method == http.MethodPost {
			pauses.Add(1)
			paused.Store(strings.Split(req.URL.Path, "/")[2], true)
			return "HTTP/1.1 204 No Content\r\n\r\n"
		}
		if listings.Add(1) == 1 {
			return first
		}
		body := listingOfAB(&paused)
		return head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	})
	src, err := New("http://"+ln.Addr().String(), AgentENV())
	require.NoError(t, err)
	return src, &listings, &pauses
}
