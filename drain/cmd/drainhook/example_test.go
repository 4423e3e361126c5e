package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/drainkit/drainkit/drain"
)

// The hook calls the server's preStop handler until the server says the
// drain wait is over, then exits 0 so the kubelet proceeds to SIGTERM.
func Example() {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(drain.PreStopSummary{Done: true, Reason: "drained"})
	}))
	defer server.Close()

	status := run([]string{"-url", server.URL + "/drain"}, io.Discard)
	fmt.Println("exit status", status)
	// Output: exit status 0
}
