package bounded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc/proctest"
)

// frozenAgainChild names, in the environment of this test binary run
// again, the calls it makes: two whose process is frozen again and again
// in their slack.
const frozenAgainChild = "DRAINKIT_BOUNDED_FROZEN_AGAIN_CHILD"

const (
	freezes  = 3                      // of the process, while its call returns
	frozen   = 150 * time.Millisecond // each: longer than the slack
	wrapStep = 15 * time.Millisecond  // the returning call's run before each freeze, and after the last
)

// callEnd is how a call of the child's ended.
type callEnd struct {
	Abandoned bool
	Err       string
}

// Fault: Call's slack was waited in two halves, the second from when the
// wait, awake past the first, had seen it end: one freeze per half. A
// process frozen again in the second half (a container at its CPU quota
// stopped every period, a loaded node) ran again with the wait's end and
// the call's return both due, and the wait could give up first: a call
// that heeded its context, and needed 60 ms of the 100 ms slack, named a
// hang. The slack is now the time the wait saw pass on time, however
// many freezes. A call that hangs in the same process is still abandoned.
// The call freezes its process (SIGSTOP) itself, so the freezes fall where
// they must however loaded the machine.
//
//	0             the context ends: the call runs 15 ms, freezes the process
//	+150 ms       the test lets it run (SIGCONT): the call runs 15 ms, freezes it again
//	+150 ms ×2    the same, twice
//	then          the call returns 15 ms later: its own error; the hung call abandoned
func TestACallReturningAsItsProcessIsFrozenAgainAndAgainIsNotAbandoned(t *testing.T) {
	if os.Getenv(frozenAgainChild) != "" {
		runFrozenAgainChild(t)
		return
	}
	child := proctest.Again(t, frozenAgainChild)
	child.HoldStops(t, freezes, frozen)
	var returning, hung callEnd
	child.Decode(t, map[string]any{"returning": &returning, "hung": &hung})
	assert.False(t, returning.Abandoned, "a call that returned %v of running after its context ended, frozen %d times: %s",
		(freezes+1)*wrapStep, freezes, returning.Err)
	assert.Equal(t, context.DeadlineExceeded.Error(), returning.Err, "its own error")
	assert.True(t, hung.Abandoned, "the call that ignores its context: %s", hung.Err)
}

// runFrozenAgainChild is the child's two calls, with the slack of drain's
// waits: one that heeds its context, freezing its process 3 times as it
// returns, and one that ignores it; then how each ended.
//
// The child runs on one P (GOMAXPROCS=1), as pause's frozen children do:
// on a loaded host the kernel can hold the thread that runs the returning
// call after a thaw while the wait's thread runs on time, and no wait can
// see a thread held so (internal/bounded's doc); on one P the thread that
// holds the call holds the wait too, and the test asserts what the slack
// promises.
func runFrozenAgainChild(t *testing.T) {
	runtime.GOMAXPROCS(1)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	var calls, fns sync.WaitGroup
	fns.Add(2)
	ends := map[string]*callEnd{}
	var mu sync.Mutex
	call := func(name string, fn func(context.Context) error) {
		calls.Go(func() {
			err := Run(ctx, slack, func(ctx context.Context) error { defer fns.Done(); return fn(ctx) })
			mu.Lock()
			ends[name] = &callEnd{Abandoned: errors.Is(err, ErrAbandoned), Err: fmt.Sprint(err)}
			mu.Unlock()
		})
	}
	call("returning", func(ctx context.Context) error {
		<-ctx.Done()
		for range freezes {
			time.Sleep(wrapStep)
			if err := proctest.FreezeSelf(); err != nil {
				return err
			}
		}
		time.Sleep(wrapStep)
		return ctx.Err()
	})
	call("hung", func(context.Context) error { <-release; return nil })
	calls.Wait()
	close(release)
	fns.Wait() // goleak, at the child's exit, finds none left
	for name, end := range ends {
		j, err := json.Marshal(end)
		require.NoError(t, err)
		fmt.Printf("%s %s\n", name, j)
	}
}
