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
// ended, of the time Call, awake past that end, saw pass on time (Within,
// and the package's doc: a process frozen inside it does not abandon a
// call that returned in time). A result that is ready when ctx ends wins
// over abandoning it. A panic in fn is returned as an error that carries
// the panic's value and stack. With slack zero, Call abandons fn as soon
// as ctx ends.
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

// Within receives from c, or reports false when nothing came within slack
// of the time this goroutine saw pass on time (Slack): however many times
// its process is frozen inside the wait, the sender had the whole slack
// of running time. With the process running, the total is slack. A value
// that is ready wins over giving up.
func Within[T any](c <-chan T, slack time.Duration) (T, bool) {
	s := NewSlack(slack)
	defer s.Stop()
	for {
		select {
		case v := <-c:
			return v, true
		case <-s.C():
			if s.Spent() {
				return ready(c)
			}
		}
	}
}

// ready receives from c if a value is there: what came, and true, or
// false.
func ready[T any](c <-chan T) (T, bool) {
	select {
	case v := <-c:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// Run is Call for a function without a result.
func Run(ctx context.Context, slack time.Duration, fn func(context.Context) error) error {
	_, err := Call(ctx, slack, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
