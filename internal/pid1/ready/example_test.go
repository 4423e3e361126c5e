package ready_test

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/drainkit/drainkit/internal/pid1/ready"
)

// The one use, as internal/startsig's Catch does: handle SIGTERM first, then
// call Ready, so that the built-in init forwards the signals it held (none in a
// process that is not its child: Ready does nothing there).
func Example() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ready.Ready() // from here the init forwards SIGTERM, and sigs receives it
	fmt.Println("SIGTERM is handled")
	// Output: SIGTERM is handled
}
