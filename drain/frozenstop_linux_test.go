package drain

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/proc/proctest"
	"github.com/drainkit/drainkit/pause"
)

// frozenStopChild names, in the environment of this test binary run
// again, the drain it makes: one whose process the test freezes as
// Shutdown stops its preStop wait.
const frozenStopChild = "DRAINKIT_DRAIN_FROZEN_STOP_CHILD"

// Fault: Shutdown waited for the preStop wait it had just stopped 200 ms
// from its own start; the wait's count, stopped then, is given up on
// 100 ms after it saw the stop. A process frozen across both (a container
// at its CPU quota, a loaded node) ran again with both due, and Shutdown
// could give up first: the Report's drain phase TimedOut, "waiting", with
// no End, where SIGTERM had stopped it. Shutdown's last 100 ms now run from
// when it, awake past the count's end, has seen that due. Before, 11 of 16
// runs.
//
//	0        the child's preStop wait counts 1 sandbox running; its next
//	         count's listing ignores its context
//	T        Shutdown starts (SIGTERM): the wait's count is stopped, given
//	         up on 100 ms after it saw that
//	T+30 ms  the child is frozen (SIGSTOP)
//	T+330 ms it runs again (SIGCONT): the drain phase Stopped by SIGTERM
func TestPreStopWaitOfAProcessFrozenAsShutdownStopsItIsStopped(t *testing.T) {
	if os.Getenv(frozenStopChild) != "" {
		runFrozenStopChild(t)
		return
	}
	child := proctest.Again(t, frozenStopChild)
	require.Equal(t, "shutdown", child.Line(t, "its Shutdown"))
	time.Sleep(30 * time.Millisecond)
	child.Freeze(t)
	time.Sleep(300 * time.Millisecond)
	child.Thaw(t)
	assertPreStopWaitStopped(t, child)
}

// runFrozenStopChild is the child's drain: a preStop wait whose first
// count finds one sandbox running and whose next listing returns 150 ms
// after its context ends; it writes "shutdown" once that listing runs,
// calls Shutdown, and writes the drain phase's report.
func runFrozenStopChild(t *testing.T) {
	runStoppedPreStopChild(t, func() error {
		time.Sleep(150 * time.Millisecond) // past drain's slack: given up on
		return nil
	})
}

// frozenStopAgainChild names, in the environment of this test binary run
// again, the drain it makes: one whose preStop wait's listing, stopped by
// Shutdown, freezes its process again and again.
const frozenStopAgainChild = "DRAINKIT_DRAIN_FROZEN_STOP_AGAIN_CHILD"

const (
	stopFreezes = 3                      // of the process, as the stopped listing runs on
	stopFrozen  = 150 * time.Millisecond // each: longer than drain's slack
	stopRun     = 15 * time.Millisecond  // the listing's run before each freeze
)

// Fault: past row 2860, Shutdown waited for the preStop wait it had just
// stopped with a rule of its own: 100 ms in wall time (the count's
// give-up, due), then 100 ms from when it, awake past that, had seen it:
// one freeze per half. The count gives up on its listing by the package's
// slack (time seen pass on time, row 3020), so a process frozen again in
// the second half (a container at its CPU quota, stopped every period; a
// loaded node) ran again with Shutdown's wait due to give up and the
// count not yet given up, and Shutdown gave up first: the drain phase
// TimedOut, "waiting", with no End, where SIGTERM had stopped it. The
// wait is now the one rule: twice drain's slack, of the time it saw pass
// on time (bounded.Within), the count's slack and as much for what
// follows it. The listing freezes its process itself (SIGSTOP), so the
// freezes fall inside the wait however loaded the machine.
//
//	0           the child's preStop wait counts 1 sandbox running; its next
//	            count's listing ignores its context
//	T           Shutdown starts (SIGTERM): the wait's count is stopped
//	+15 ms      the listing freezes the process; +150 ms the test thaws it
//	            (SIGCONT), 3 times
//	then        the listing runs on, given up on by the count 100 ms (seen
//	            on time) after: the drain phase Stopped by SIGTERM
func TestPreStopWaitOfAProcessFrozenAgainAndAgainAsShutdownStopsItIsStopped(t *testing.T) {
	if os.Getenv(frozenStopAgainChild) != "" {
		runFrozenStopAgainChild(t)
		return
	}
	child := proctest.Again(t, frozenStopAgainChild)
	child.HoldStops(t, stopFreezes, stopFrozen)
	assertPreStopWaitStopped(t, child)
}

// runFrozenStopAgainChild is the child's drain: a preStop wait whose
// first count finds one sandbox running and whose next listing, once its
// context ends, runs 15 ms and freezes the process, 3 times, then runs
// past drain's slack; Shutdown once that listing runs; then the drain
// phase's report.
func runFrozenStopAgainChild(t *testing.T) {
	runStoppedPreStopChild(t, func() error {
		for range stopFreezes {
			time.Sleep(stopRun)
			if err := proctest.FreezeSelf(); err != nil {
				return err
			}
		}
		time.Sleep(2 * returnSlack) // past drain's slack: given up on
		return nil
	})
}

// assertPreStopWaitStopped reads a frozen child's drain phase to the
// child's end and asserts that SIGTERM stopped its preStop wait, which
// ended.
func assertPreStopWaitStopped(t *testing.T, child *proctest.Child) {
	t.Helper()
	var p PhaseReport
	child.Decode(t, map[string]any{"phase": &p})
	assert.Equal(t, Stopped, p.Result, "the wait was stopped by SIGTERM, not still waiting: %q", p.Error)
	assert.Equal(t, reasonSIGTERM, p.Error)
	assert.False(t, p.End.IsZero(), "the wait ended")
}

// runStoppedPreStopChild is a frozen child's drain: a preStop wait whose
// first count finds one sandbox running and whose next listing, once its
// context ends, runs stopped and returns its error, or the context's; it
// writes "shutdown" once that listing runs, calls Shutdown, and writes the
// drain phase's report.
func runStoppedPreStopChild(t *testing.T, stopped func() error) {
	node := fakesandbox.NewNode()
	node.AddN("sb", 1, 10*time.Millisecond)
	var lists atomic.Int32
	listing := make(chan struct{})
	list := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		if lists.Add(1) != 2 {
			return node.List(ctx)
		}
		close(listing)
		<-ctx.Done()
		if err := stopped(); err != nil {
			return nil, err
		}
		return nil, ctx.Err()
	})
	b, err := deadline.New(30*time.Second, deadline.Config{Margin: time.Second})
	require.NoError(t, err)
	d, err := New(Config{Budget: b, Sandboxes: list, PollInterval: 10 * time.Millisecond,
		Pause: pause.Config{Estimator: deadline.NewEstimator(10 * time.Millisecond)}})
	require.NoError(t, err)
	go d.PreStop().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/drain", nil))
	<-listing
	fmt.Println("shutdown")
	rep := d.Shutdown(t.Context())
	j, err := json.Marshal(rep.Phase(PhaseDrain))
	require.NoError(t, err)
	fmt.Printf("phase %s\n", j)
}
