package keepaliveclose_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/drainkit/drainkit/internal/keepaliveclose"
)

// A client that keeps its connection for a next request sends it to a
// connection the server closes as it arrives: the POST gets no answer, and
// net/http does not send it again. One that dials for each request is
// answered.
func Example() {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	ln := keepaliveclose.Wrap(srv.Listener)
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	post := func(c *http.Client) string {
		resp, err := c.Post(srv.URL, "", nil)
		if err != nil {
			return "no answer"
		}
		resp.Body.Close()
		return resp.Status
	}
	kept := &http.Client{Transport: &http.Transport{}}
	defer kept.CloseIdleConnections()
	fmt.Println(post(kept), "then", post(kept))
	own := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	fmt.Println(post(own), "then", post(own))
	fmt.Println("dropped:", ln.Dropped())
	// Output:
	// 204 No Content then no answer
	// 204 No Content then 204 No Content
	// dropped: 1
}
