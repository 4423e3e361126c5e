package httpsource

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// Fault: a listing whose answer ended mid-body (a connection closed before
// the end of a body the close delimits: no Content-Length, not chunked, as
// an HTTP/1.0 proxy in front of the server sends it) was read as an answer
// of another shape ("want an array of objects: unexpected end of JSON
// input"), a permanent error: the Preserver listed no more, its Report
// Unknown, no sandbox preserved, where the next listing would have
// answered. A body that is the start of a JSON document is now a cut
// answer, transient, and the listing is made again. Over loopback, a
// server answering its first listing cut after 37 bytes, then whole:
//
//	before: Unknown, 0 preserved, ListErr "unexpected end of JSON input"
//	now:    the listing made again: 2 of 2 preserved
func TestAListingAnswerCutMidBodyIsListedAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var listings, pauses atomic.Int64
	var paused sync.Map // sandboxID: true once its pause was answered
	go serveCloseDelimited(ln, func(req *http.Request) string {
		if req.Method == http.MethodPost {
			pauses.Add(1)
			paused.Store(strings.Split(req.URL.Path, "/")[2], true)
			return "HTTP/1.1 204 No Content\r\n\r\n"
		}
		listing := listingOfAB(&paused)
		answer := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + listing
		if listings.Add(1) == 1 {
			return answer[:len(answer)-len(listing)+37] // cut after the first element and its comma
		}
		return answer
	})
	src, err := New("http://"+ln.Addr().String(), AgentENV())
	require.NoError(t, err)
	_, err = src.List(t.Context())
	require.Error(t, err)
	assert.False(t, isPermanent(err), "a cut answer, not one of another shape: %v", err)
	assert.Contains(t, err.Error(), "ended mid-body")

	preservesBothAfterACutListing(t, src, &listings, &pauses)
}

// preservesBothAfterACutListing runs a Preserver over src, whose server
// cuts the listing it counts first in listings (reset here, so that the
// Preserver's own first listing is cut), and checks that it listed again
// and preserved both sandboxes, a pause each (counted in pauses).
func preservesBothAfterACutListing(t *testing.T, src *Source, listings, pauses *atomic.Int64) {
	t.Helper()
	listings.Store(0)
	p, err := pause.New(src, pause.Config{})
	require.NoError(t, err)
	rep := p.Run(ctxWithDeadline(t, 10*time.Second), time.Time{})

	assert.False(t, rep.Unknown, rep.ListErr)
	assert.Equal(t, 2, rep.Counts[pause.Preserved], "%v", rep.Entries)
	assert.Equal(t, int64(2), pauses.Load())
}

// serveCloseDelimited answers each connection's first request on ln with
// what answer returns, written as it is, then closes the connection: a body
// without a length ends with the close.
func serveCloseDelimited(ln net.Listener, answer func(*http.Request) string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err != nil {
				return
			}
			fmt.Fprint(c, answer(req))
		}()
	}
}

// What "cut mid-body" is depends on how the answer says where its body
// ends, and each framing's cut is transient, listed again: a body the
// close delimits ends at the close, so its cut is found by the JSON that
// stops short (cutShort, row 2164); a Content-Length or chunked body that
// ends early is the reader's own error (unexpected EOF), as a stream reset
// is over HTTP/2. Over loopback, the first listing cut after 37 bytes of
// its listing:
//
//	close-delimited, Content-Length, chunked (cut inside a chunk, and
//	between chunks): an error not permanent, then 2 of 2 preserved
func TestAListingCutMidBodyIsListedAgainWhateverItsFraming(t *testing.T) {
	const listing = `[{"sandboxID":"a","state":"running"},{"sandboxID":"b","state":"running"}]`
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	framings := map[string]string{
		"close-delimited":      head + "Connection: close\r\n\r\n" + listing[:37],
		"Content-Length":       head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(listing)) + listing[:37],
		"chunked, in a chunk":  head + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n", len(listing)) + listing[:37],
		"chunked, between two": head + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", 37, listing[:37]),
	}
	for name, cut := range framings {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			var listings, pauses atomic.Int64
			var paused sync.Map
			go serveCloseDelimited(ln, func(req *http.Request) string {
				if req.Method == http.MethodPost {
					pauses.Add(1)
					paused.Store(strings.Split(req.URL.Path, "/")[2], true)
					return "HTTP/1.1 204 No Content\r\n\r\n"
				}
				if listings.Add(1) == 1 {
					return cut
				}
				body := listing
				paused.Range(func(id, _ any) bool {
					body = strings.Replace(body, fmt.Sprintf(`"%s","state":"running"`, id), fmt.Sprintf(`"%s","state":"paused"`, id), 1)
					return true
				})
				return head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
			})
			src, err := New("http://"+ln.Addr().String(), AgentENV())
			require.NoError(t, err)
			_, err = src.List(t.Context())
			require.Error(t, err)
			assert.False(t, isPermanent(err), "a cut answer: %v", err)
			preservesBothAfterACutListing(t, src, &listings, &pauses)
		})
	}
}

// listingOfAB is AgentENV's listing of sandboxes a and b, each running until paused
// holds its ID.
func listingOfAB(paused *sync.Map) string {
	var elems []string
	for _, id := range []string{"a", "b"} {
		state := "running"
		if _, ok := paused.Load(id); ok {
			state = "paused"
		}
		elems = append(elems, fmt.Sprintf(`{"sandboxID":%q,"state":%q}`, id, state))
	}
	return "[" + strings.Join(elems, ",") + "]"
}
