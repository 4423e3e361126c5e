package startsig

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// newDrainer is a Drainer over node with the pod's grace.
func newDrainer(t *testing.T, node *draintest.Node, grace time.Duration) *drain.Drainer {
	t.Helper()
	budget, err := deadline.New(grace, deadline.Config{})
	require.NoError(t, err)
	d, err := drain.New(drain.Config{Budget: budget, Sandboxes: node})
	require.NoError(t, err)
	return d
}

// signalSelf sends sig to this process, as the kubelet (through the container runtime) does.
func signalSelf(t *testing.T, sig os.Signal) {
	t.Helper()
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, self.Signal(sig))
}

// The timeline this package protects:
//
//	Catch                    first thing in main
//	SIGTERM                  while the server starts (its lock, its device daemon):
//	                         logged, the process goes on
//	... the start ends ...
//	Drain                    drains at once; the budget starts at the SIGTERM, so
//	                         SIGKILL = SIGTERM + grace, not Drain + grace
func TestSIGTERMWhileStartingDrainsFromItsArrival(t *testing.T) {
	var logs logbuf.Buffer
	c := Catch(slog.New(slog.NewTextHandler(&logs, nil)), "sandboxd")
	defer c.Stop()
	sent := time.Now()
	signalSelf(t, syscall.SIGTERM)
	select {
	case <-c.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("no SIGTERM caught")
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "SIGTERM while sandboxd starts") }, 10*time.Second, time.Millisecond)

	node := draintest.NewNode()
	sb := node.Add(&draintest.Sandbox{Name: "sb-1"})[0]
	const grace = 30 * time.Second
	d := newDrainer(t, node, grace)
	started := time.Now() // the start ends
	assert.False(t, d.Budget().Anchored(), "nothing anchored the budget before Drain")

	report := c.Drain(context.Background(), d)
	require.NoError(t, report.Err())
	assert.True(t, sb.Preserved(), "drained at once")
	assert.False(t, report.Budget.Start.Before(sent), "the budget starts at the SIGTERM's arrival")
	assert.True(t, report.Budget.Start.Before(started), "the budget starts at the SIGTERM, not when Drain was called")
	assert.Equal(t, report.Budget.Start.Add(grace), report.Budget.Kill, "SIGKILL is the kubelet's: SIGTERM + grace")
	assert.Contains(t, logs.String(), "draining after the SIGTERM that came while sandboxd started")
}

// A wait the signal should end ends with it, and says why.
func TestContextEndsAtTheFirstSignal(t *testing.T) {
	c := Catch(nil, "the worker")
	defer c.Stop()
	ctx, cancel := c.Context(context.Background())
	defer cancel()
	require.NoError(t, ctx.Err())
	signalSelf(t, syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end at SIGINT")
	}
	assert.EqualError(t, context.Cause(ctx), "SIGINT received")

	later, cancelLater := c.Context(context.Background())
	defer cancelLater()
	select {
	case <-later.Done():
		assert.EqualError(t, context.Cause(later), "SIGINT received", "a wait begun after the signal ends at once")
	case <-time.After(10 * time.Second):
		t.Fatal("a context made after the signal did not end")
	}
}

// A context released before any signal ends as cancelled, and its goroutine with it.
func TestContextReleased(t *testing.T) {
	c := Catch(nil, "the worker")
	defer c.Stop()
	ctx, cancel := c.Context(context.Background())
	cancel()
	cancel()
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled)
}

// A signal after Drain began is the Drainer's: the first starts the drain, a SIGINT after
// it forces (the preserve running runs on: Force starts no new one), and nothing is logged
// as coming "while starting".
func TestSignalsDuringDrainAreTheDrainers(t *testing.T) {
	var logs logbuf.Buffer
	c := Catch(slog.New(slog.NewTextHandler(&logs, nil)), "sandboxd")
	defer c.Stop()
	node := draintest.NewNode()
	sb := node.Add(&draintest.Sandbox{Name: "sb-1", Latency: 3 * time.Second})[0]
	d := newDrainer(t, node, 2*time.Hour)
	done := make(chan *drain.Report, 1)
	go func() { done <- c.Drain(context.Background(), d) }()
	require.Eventually(t, func() bool { return c.draining.Load() }, 10*time.Second, time.Millisecond)
	signalSelf(t, syscall.SIGTERM)
	require.Eventually(t, func() bool { return node.InFlight() == 1 }, 10*time.Second, time.Millisecond, "the preserve started")
	signalSelf(t, syscall.SIGINT)
	select {
	case <-d.Forced():
	case <-time.After(10 * time.Second):
		t.Fatal("the SIGINT did not force the drain")
	}
	rep := <-done
	assert.True(t, rep.Forced)
	assert.True(t, sb.Preserved(), "the preserve under way ran on")
	assert.NotContains(t, logs.String(), "starts: it drains")
}

// Stop ends the catching and its goroutines (goleak checks them); twice is fine.
func TestStopTwice(t *testing.T) {
	c := Catch(nil, "sandboxd")
	c.Stop()
	c.Stop()
	select {
	case <-c.Arrived():
		t.Fatal("nothing arrived")
	default:
	}
}
