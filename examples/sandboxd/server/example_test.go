package server_test

import (
	"fmt"
	"io"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
)

// The one number a manifest passes, the grace period, sizes the reserves of the teardown
// steps (and, in package deadline, the margin).
func ExampleParseFlags() {
	cfg, err := server.ParseFlags([]string{"-state-dir", "/var/lib/sandboxd", "-grace", "1h", "-concurrency", "8"}, io.Discard)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("grace", cfg.Grace, "ublk", cfg.UblkReserve(), "http", cfg.HTTPReserve())

	_, err = server.ParseFlags([]string{"-state-dir", "/s", "-runtime", "docker"}, io.Discard)
	fmt.Println(err)
	// Output:
	// grace 1h0m0s ublk 30s http 5s
	// -runtime "docker": want fake or runsc
}
