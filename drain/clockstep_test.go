package drain

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/wallstep"
	"github.com/drainkit/drainkit/pause"
)

// The budget's times keep the wall clock reading of when they were taken
// (T0, at the preStop call) and are compared on the monotonic clock. The
// preStop handler's answer is JSON: its drain deadline, text, carries only
// a wall clock reading, and the exec hook compares it with its own clock.
// After NTP stepped the node's clock forward between the preStop call and
// an answer, the answer named an instant the step earlier than the drain's
// own deadline, and the hook stopped waiting that much before the drain
// did: the kubelet's SIGTERM came early, and the drain wait, which the
// sandboxes' users have for finishing their work, was cut by the step.
// Fault (row 2180). Real time, on loopback: a step cannot be made in a
// synctest bubble, whose time.Now carries no monotonic reading.
//
//	T0      the preStop call, the node's clock 2 s slow; NTP steps it 2 s forward
//	        the hook polls; the drain answers its deadline, T0 + 3.5 s (grace 5 s, margin 1.5 s)
//	        before: named T0 + 1.5 s by the clock as it reads now
//	T0+1.5  before: the hook gave up ("the drain deadline ... passed"), SIGTERM would follow
//	T0+3.2  the drain's wait ends (a sandbox still runs): the hook's last answer, done
func TestExecHookWaitsOutTheDrainAfterTheClockWasStepped(t *testing.T) {
	budget, err := deadline.New(5*time.Second, deadline.Config{})
	require.NoError(t, err)
	start := time.Now()
	t0, err := wallstep.Stepped(start, -2*time.Second)
	require.NoError(t, err)
	require.True(t, budget.OnPreStop(t0), "T0, read while the clock was 2 s slow")
	node := fakesandbox.NewNode()
	node.AddN("sb", 1, 10*time.Millisecond) // runs on: the wait goes to its deadline
	d, err := New(Config{Budget: budget, Sandboxes: pause.Lister(node)})
	require.NoError(t, err)
	srv := httptest.NewServer(d.PreStop())
	defer srv.Close()
	defer d.Shutdown(context.Background())

	sum, err := ExecHook{URL: srv.URL, RequestTimeout: time.Second, Start: start}.Run(context.Background())
	t.Logf("the hook returned at T0 + %v, the drain deadline at T0 + %v", time.Since(start), d.plan.Deadline(PhaseDrain).Sub(start))

	require.NoError(t, err, "the hook stopped before the drain's answer")
	require.NotNil(t, sum)
	assert.True(t, sum.Done)
	assert.Equal(t, reasonDeadline, sum.Reason)
}
