package wrappedtransport_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/drainkit/drainkit/internal/wrappedtransport"
)

// A test puts the wrapper in http.DefaultTransport, as a program that wraps
// it does; a client on the default transport goes through it, one with its
// own transport does not.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var cleanup cleanups // a test's *testing.T in real use
	defer cleanup.run()
	wrapper := wrappedtransport.Install(&cleanup)

	get := func(c *http.Client) {
		if resp, err := c.Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	}
	get(&http.Client{})               // the default transport: the wrapper
	own := &http.Transport{}          // a client's own transport
	get(&http.Client{Transport: own}) // not the wrapper
	wrapper.Next.(*http.Transport).CloseIdleConnections()
	own.CloseIdleConnections()
	fmt.Println("requests through the wrapper:", wrapper.Requests())
	// Output: requests through the wrapper: 1
}

// cleanups stands for a test's *testing.T, whose Cleanup functions run
// when it ends.
type cleanups []func()

func (c *cleanups) Cleanup(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}
