package early_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/pid1/early"
)

// Only PID 1 of a PID namespace catches signals from the package's
// initialisation on; anywhere else (here, a test process) Signals is nil
// and the program's signals are its own to ask for.
func ExampleSignals() {
	fmt.Println("caught since initialisation:", early.Signals() != nil)
	// Output: caught since initialisation: false
}
