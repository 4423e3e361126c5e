package proctest_test

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/proc/proctest"
)

// A test running now is in no sigwait: only a SigwaitInit that printed "ready" is seen
// waiting.
func ExampleInSigwait() {
	fmt.Println(proctest.InSigwait(os.Getpid()))
	// Output: false
}
