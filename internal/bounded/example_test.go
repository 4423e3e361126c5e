package bounded_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drainkit/drainkit/internal/bounded"
)

// A step that ignores its context is abandoned a slack after its deadline.
func ExampleCall() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	_, err := bounded.Call(ctx, 10*time.Millisecond, func(context.Context) (int, error) {
		<-release // ignores ctx
		return 1, nil
	})
	fmt.Println(errors.Is(err, bounded.ErrAbandoned))
	// Output: true
}
