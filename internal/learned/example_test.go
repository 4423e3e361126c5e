package learned_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/learned"
)

// A server writes what it learned at shutdown and starts from it next
// time.
func Example() {
	dir, _ := os.MkdirTemp("", "state")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, learned.File)

	est := deadline.NewEstimator(time.Second) // the configured prior
	est.Observe(250 * time.Millisecond)       // the shutdown measured one preserve
	r := learned.Rates{Written: time.Now(), Limit: 4, Grace: 30 * time.Second}
	r.FromEstimator(est)
	if err := r.Write(path); err != nil {
		fmt.Println(err)
		return
	}

	loaded, err := learned.Read(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	next := deadline.NewEstimator(loaded.Estimate) // the next process starts from it
	fmt.Println(next.Estimate(), loaded.Limit)
	// Output: 250ms 4
}
