package drain

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// A Step is one teardown action run after preservation, in the order given:
// stopping the block-device daemon, cleaning up the network, shutting down
// the API servers. Steps are plain values; a server adds its own.
type Step struct {
	// Name identifies the step in the plan and the Report; unique, and not
	// one of the phase names "drain", "gate" or "preserve".
	Name string
	// Reserve is the time the step needs at least. The phases before it end
	// early enough to leave it (and every later step) its reserve; in force
	// mode it is all the step gets.
	Reserve time.Duration
	// Run does the work and should return when ctx is done. A Run that
	// does not is abandoned shortly after its deadline and reported
	// Abandoned; the next step runs anyway.
	Run func(ctx context.Context) error
	// Critical marks a step whose reserve nothing before it may spend:
	// preserves still in flight at the preserve phase's deadline (the
	// pause.FinishInFlight policy) are abandoned by the time the first
	// critical step must start, instead of at the budget's deadline. Mark
	// the block-device teardown critical: on a kernel without the ublk
	// cancel fix, a daemon killed with live devices can crash the host,
	// which costs more than one unfinished pause.
	Critical bool
}

// ErrForced is the cause of a phase context cancelled by force mode.
var ErrForced = errors.New("drain: forced")

// returnSlack is how long a step (or the preserver) may take to return after
// its context ended before it is abandoned: a cooperative Run returns within
// it, so it is reported with its own error rather than as abandoned.
const returnSlack = 100 * time.Millisecond

// errAbandoned marks a function that did not return by its deadline.
var errAbandoned = errors.New("did not return by its deadline; abandoned")

// runBounded calls fn(ctx) in its own goroutine and returns its error, or
// errAbandoned if fn has not returned returnSlack after ctx ended. A panic in
// fn is recovered and returned as an error with its stack.
func runBounded(ctx context.Context, fn func(context.Context) error) error {
	res := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				res <- fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			}
		}()
		res <- fn(ctx)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(returnSlack)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
		return errAbandoned
	}
}
