package servingtest_test

import (
	"net"
	"testing"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/servingtest"
)

// A server's test closes the server's listener under it, so that its Accept
// fails for good, waits for its Run to return (no SIGTERM comes: only
// serving's end drains it), and checks what it did.
func ExampleDrainedAtOnce() {
	check := func(t *testing.T, ln net.Listener, run func() (*drain.Report, error), log func() string) {
		closed := time.Now()
		if err := ln.Close(); err != nil { // serving the API stops
			t.Fatal(err)
		}
		rep, err := run()
		servingtest.DrainedAtOnce(t, rep, err, log(), closed, "serving the API stopped")
	}
	_ = check
	// Output:
}
