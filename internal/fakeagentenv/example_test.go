package fakeagentenv_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

// Two pages of running sandboxes, the second one reached through the
// x-next-token header.
func Example() {
	srv, _ := fakeagentenv.New(fakeagentenv.Config{PageSize: 2})
	for range 3 {
		_, _ = srv.Create(1024)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	resp, _ := http.Get(ts.URL + "/v2/sandboxes?state=running")
	resp.Body.Close()
	tok := resp.Header.Get(fakeagentenv.HeaderNextToken)
	fmt.Println(resp.StatusCode, tok != "")
	resp, _ = http.Get(ts.URL + "/v2/sandboxes?state=running&nextToken=" + tok)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get(fakeagentenv.HeaderNextToken) == "")
	// Output:
	// 200 true
	// 200 true
}
