package bounded

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// ErrAbandoned is the error of a call that had not returned slack after its
// context ended.
var ErrAbandoned = errors.New("did not return by its deadline; abandoned")

// Call calls fn(ctx) in its own goroutine and returns what it returns, or
// ErrAbandoned with the zero value if fn has not returned slack after ctx
// ended, the slack's second half counted from when Call, awake, has seen
// the first end (so a process frozen inside it does not abandon a call
// that returned in time). A result that is ready when ctx ends wins over
// abandoning it. A panic in fn is returned as an error that carries the
// panic's value and stack. With slack zero, Call abandons fn as soon as
// ctx ends.
func Call[T any](ctx context.Context, slack time.Duration, fn func(context.Context) (T, error)) (T, error) {
	res := make(chan outcome[T], 1) // fn's goroutine never blocks on an abandoned call
	go func() {
		defer func() {
			if p := recover(); p != nil {
				res <- outcome[T]{err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
			}
		}()
		v, err := fn(ctx)
		res <- outcome[T]{v, err}
	}()
	select {
	case o := <-res:
		return o.v, o.err
	case <-ctx.Done():
	}
	if o, ok := Within(res, slack); ok {
		return o.v, o.err
	}
	var zero T
	return zero, ErrAbandoned
}

// outcome is what a call returned.
type outcome[T any] struct {
	v   T
	err error
}

// Within receives from c, or reports false when nothing came within slack.
// The slack is waited in two halves, the second from when this goroutine,
// awake past the first, has seen it end: a process frozen inside the slack
// (a container at its CPU quota, a loaded node's scheduler) runs again with
// this wait and the send it waits for both due, and a wait that gave up
// then abandoned a call that returned in time as one that ignored its
// context (docs/faults.md rows 2861, 2941). Blocked for the second half,
// this goroutine's thread runs the sender's. The total, with the process
// running, is slack. A value that is ready wins over giving up.
func Within[T any](c <-chan T, slack time.Duration) (T, bool) {
	t := time.NewTimer(slack / 2)
	defer t.Stop()
	if v, ok := received(c, t.C); ok {
		return v, true
	}
	t.Reset(slack - slack/2) // fired, and read: no stale tick
	return received(c, t.C)
}

// received waits for c until end fires: what came, and true, or false
// when end fired first.
func received[T any](c <-chan T, end <-chan time.Time) (T, bool) {
	select {
	case v := <-c:
		return v, true
	case <-end:
		var zero T
		return zero, false
	}
}

// Run is Call for a function without a result.
func Run(ctx context.Context, slack time.Duration, fn func(context.Context) error) error {
	_, err := Call(ctx, slack, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
