// Command naiveserver runs the naive sandbox server of
// examples/supervisor/internal/naiveserver as a program of its own, for the
// real-kubelet tests (internal/realkubelet), which pack it into an image
// behind the supervisor.
package main

import (
	"os"

	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
)

func main() {
	os.Exit(naiveserver.Main(os.Args[1:], os.Stderr))
}
