package listeningtest_test

import (
	"net"
	"testing"

	"github.com/drainkit/drainkit/internal/listening/listeningtest"
)

// A test listens on each name in turn, as a server of its own would, and
// checks that the socket table's reader still finds it.
func ExampleUnixNamesShownOtherwise() {
	eachOddName := func(t *testing.T) {
		for odd, name := range listeningtest.UnixNamesShownOtherwise(t, "drainkit", "agent") {
			t.Run(odd, func(t *testing.T) {
				ln, err := net.Listen("unix", name)
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				// ... the test proper, with a socket listening on name
			})
		}
	}
	_ = eachOddName
	// Output:
}
