package drain

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
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
	require.True(t, budget.OnPreStop(wallStepped(t, start, -2*time.Second)), "T0, read while the clock was 2 s slow")
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

// wallStepped is at as it was read while the node's wall clock was off by d
// (whole seconds) from what it reads now: the same monotonic reading, a
// wall clock reading d later. Package time has no way to make one short of
// stepping the node's clock, so it sets the wall clock seconds of
// time.Time's unexported fields (the layout Go has kept since 1.9), and
// fails if the result is not that; deadline's clock tests have its twin.
func wallStepped(t *testing.T, at time.Time, d time.Duration) time.Time {
	t.Helper()
	require.True(t, at != at.Round(0) && d%time.Second == 0, "at on the monotonic clock, d whole seconds")
	type layout struct { // time.Time's fields
		wall uint64 // with a monotonic reading: seconds since 1885 in bits 30..62
		ext  int64  // the monotonic reading
		loc  *time.Location
	}
	out := at
	p := (*layout)(unsafe.Pointer(&out))
	p.wall += uint64(int64(d/time.Second)) << 30
	require.True(t, out.Sub(at) == 0 && out.Round(0).Sub(at.Round(0)) == d,
		"wallStepped no longer matches time.Time's layout: %v from %v", out, at)
	return out
}
