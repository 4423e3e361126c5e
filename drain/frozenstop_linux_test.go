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
	var p PhaseReport
	child.Decode(t, map[string]any{"phase": &p})
	assert.Equal(t, Stopped, p.Result, "the wait was stopped by SIGTERM, not still waiting: %q", p.Error)
	assert.Equal(t, reasonSIGTERM, p.Error)
	assert.False(t, p.End.IsZero(), "the wait ended")
}

// runFrozenStopChild is the child's drain: a preStop wait whose first
// count finds one sandbox running and whose next listing returns 150 ms
// after its context ends; it writes "shutdown" once that listing runs,
// calls Shutdown, and writes the drain phase's report.
func runFrozenStopChild(t *testing.T) {
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
		time.Sleep(150 * time.Millisecond) // past drain's slack: given up on
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
