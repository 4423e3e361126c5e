package pid1_test

import (
	"fmt"

	"github.com/drainkit/drainkit/internal/pid1"
)

// A server's main calls Init first. Anywhere but PID 1 of a PID namespace (here, a test
// process) it returns at once and the program runs as it is.
func Example() {
	pid1.Init()
	fmt.Println("the program runs")
	// Output: the program runs
}
