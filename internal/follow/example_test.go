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

// A step's deadline moves earlier while it runs: the context it was given
// says so, where a context's own deadline is the one it was made with.
func ExampleDeadline() {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ctx, cancel := context.WithDeadline(context.Background(), t0.Add(time.Minute))
	defer cancel()

	var d follow.Deadline
	step := d.Context(ctx)
	dl, _ := step.Deadline()
	fmt.Println("given:", dl.Sub(t0))

	fmt.Println("moved:", d.Move(t0.Add(10*time.Second)))
	dl, _ = step.Deadline()
	fmt.Println("now:", dl.Sub(t0))

	fmt.Println("moved later:", d.Move(t0.Add(30*time.Second)))
	dl, _ = step.Deadline()
	fmt.Println("still:", dl.Sub(t0))
	// Output:
	// given: 1m0s
	// moved: true
	// now: 10s
	// moved later: false
	// still: 10s
}

// A Force while a step runs leaves it its reserve from then: the step is
// told its new deadline, then its context ends there.
func ExampleReserve() {
	forced := make(chan struct{})
	var moved follow.Deadline
	ctx, stop := follow.Reserve(context.Background(), forced, func() time.Duration { return 10 * time.Millisecond },
		func(dl time.Time) bool {
			fmt.Println("told; moved:", moved.Move(dl))
			return true
		}, errors.New("forced: the step keeps its reserve"))
	defer stop()
	step := moved.Context(ctx)

	close(forced)
	<-step.Done()
	_, ok := step.Deadline()
	fmt.Println("has a deadline:", ok)
	fmt.Println(context.Cause(step))
	// Output:
	// told; moved: true
	// has a deadline: true
	// forced: the step keeps its reserve
}
