package pause

import (
	"sync"
	"time"
)

// rateWeight is the weight of a new observation in the measured rate, as
// in deadline.Estimator's mean.
const rateWeight = 0.2

// A byteRate is the time one preserve takes per byte of its size, learned
// from every Sized sandbox preserved (an exponentially weighted mean of
// duration / size) and kept across Runs, so a preStop sweep teaches the
// SIGTERM Run. It is the time of one preserve among the others running
// with it, which is what a slot of the schedule takes.
type byteRate struct {
	mu        sync.Mutex
	nsPerByte float64
	n         int
}

func (b *byteRate) observe(size int64, d time.Duration) {
	if size <= 0 || d <= 0 {
		return
	}
	v := float64(d) / float64(size)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n == 0 {
		b.nsPerByte = v
	} else {
		b.nsPerByte += rateWeight * (v - b.nsPerByte)
	}
	b.n++
}

// get returns the measured nanoseconds per byte, and false before the
// first measurement.
func (b *byteRate) get() (float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nsPerByte, b.n > 0
}
