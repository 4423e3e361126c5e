package wallstep_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/wallstep"
)

// T0 read while the clock was 2 s slow: on the monotonic clock it is now,
// on the wall clock 2 s before.
func Example() {
	now := time.Now()
	t0, err := wallstep.Stepped(now, -2*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("monotonic:", t0.Sub(now))
	fmt.Println("wall clock:", t0.Round(0).Sub(now.Round(0)))
	// Output:
	// monotonic: 0s
	// wall clock: -2s
}
