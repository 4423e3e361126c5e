package prestopsleep_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/prestopsleep"
)

// A pod whose preStop hook sleeps 20 s out of its 30 s grace: the drain
// reads the sleep its budget was declared with, and SIGTERM's share of the
// grace.
func Example() {
	b, _ := deadline.New(30*time.Second, deadline.Config{PreStopSleep: 20 * time.Second})
	sleep := prestopsleep.Of(b)
	fmt.Println("sleep", sleep, "SIGTERM leaves", deadline.KubeletRemaining(b.Grace(), sleep))
	// Output: sleep 20s SIGTERM leaves 10s
}
