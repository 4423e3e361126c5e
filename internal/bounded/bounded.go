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
// ended. A result that is ready when ctx ends wins over abandoning it. A
// panic in fn is returned as an error that carries the panic's value and
// stack. With slack zero, Call abandons fn as soon as ctx ends.
func Call[T any](ctx context.Context, slack time.Duration, fn func(context.Context) (T, error)) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	res := make(chan outcome, 1) // fn's goroutine never blocks on an abandoned call
	go func() {
		defer func() {
			if p := recover(); p != nil {
				res <- outcome{err: fmt.Errorf("panic: %v\n%s", p, debug.Stack())}
			}
		}()
		v, err := fn(ctx)
		res <- outcome{v, err}
	}()
	select {
	case o := <-res:
		return o.v, o.err
	case <-ctx.Done():
	}
	t := time.NewTimer(slack)
	defer t.Stop()
	select {
	case o := <-res:
		return o.v, o.err
	case <-t.C:
		var zero T
		return zero, ErrAbandoned
	}
}

// Run is Call for a function without a result.
func Run(ctx context.Context, slack time.Duration, fn func(context.Context) error) error {
	_, err := Call(ctx, slack, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}
