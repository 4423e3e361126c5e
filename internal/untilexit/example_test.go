package untilexit_test

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/drainkit/drainkit/internal/untilexit"
)

// A server has drained and writes its Report when the kubelet's SIGTERM comes again:
// kept, it is dropped, and the server exits with its own status.
func Example() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM) // the server's own, before it serves
	// ... the drain ...
	untilexit.Keep(syscall.SIGTERM, os.Interrupt) // before sigs stops
	signal.Stop(sigs)

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM) // the kubelet's again
	_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	<-winch // delivered after the SIGTERM: that one has come and gone
	fmt.Println("Report written; exit 0")
	// Output: Report written; exit 0
}
