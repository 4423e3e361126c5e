package follow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/drainkit/drainkit/internal/follow"
)

// A deadline an hour away moves 10 ms away (a read of the pod's deletion with a
// shorter grace): the context ends there, with the cause given.
func ExampleEarlier() {
	var mu sync.Mutex
	deadline, moved := time.Now().Add(time.Hour), make(chan struct{})
	changed := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		return moved
	}
	var last time.Time
	next := func() (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && !deadline.Before(last) {
			return time.Time{}, false
		}
		last = deadline
		return deadline, true
	}

	ctx, stop := follow.Earlier(context.Background(), changed, next, errors.New("SIGKILL moved earlier"))
	defer stop()
	mu.Lock()
	deadline = time.Now().Add(10 * time.Millisecond)
	close(moved)
	moved = make(chan struct{})
	mu.Unlock()

	<-ctx.Done()
	fmt.Println(context.Cause(ctx))
	// Output: SIGKILL moved earlier
}
