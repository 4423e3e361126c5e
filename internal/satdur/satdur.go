package satdur

import (
	"math"
	"time"
)

// Add is a + b for non-negative durations, at most the largest Duration.
func Add(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
