package satdur_test

import (
	"fmt"
	"math"
	"time"

	"github.com/drainkit/drainkit/internal/satdur"
)

// Two reserves, and a third no plan can hold.
func Example() {
	fmt.Println(satdur.Add(3*time.Second, 4*time.Second))
	fmt.Println(satdur.Add(time.Duration(math.MaxInt64-1), time.Hour) == math.MaxInt64)
	// Output:
	// 7s
	// true
}
