package draintest_test

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// busy makes the machine busy for the rest of t: one CPU for the Go scheduler, and a
// goroutine that wants it all the time, as on a CI runner shared with other builds. A
// goroutine whose timer fires then waits for the CPU, up to the scheduler's 10 ms time
// slice, and the goroutine of a context's own timer waits too.
func busy(t *testing.T) {
	t.Helper()
	prev := runtime.GOMAXPROCS(1)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() { // busy, never blocked
		}
	})
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
	})
}

// In real time (the package Example's way, a user's test without synctest), a preserve
// whose context's deadline comes 1 ms before its Latency ends is cut, as a real
// runtime's is, on a busy machine too: the Run counts it lost, never preserved.
// Fault: the fake returned nil whenever it noticed its end no earlier than ctx's, and on
// a busy machine both are noticed late, together: with one CPU taken, a Run whose phase
// deadline cut 10 preserves by 1 ms reported 10/10 preserved and no error (without the
// load: 10/10 timed out), and 20/20 preserves called by hand with such a deadline
// succeeded (at load 7 on 2 CPUs, 25-50%), so a test that the deadline cuts them passed
// or failed with the machine's load, and one that all are preserved passed with a
// deadline too short.
func TestPreserveCutByItsDeadlineIsNotPreservedOnABusyMachine(t *testing.T) {
	busy(t)
	for i := range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Millisecond)
		sb := &draintest.Sandbox{Name: "sb", Latency: 3 * time.Millisecond}
		assert.ErrorIs(t, sb.Preserve(ctx), context.DeadlineExceeded, "attempt %d", i)
		assert.False(t, sb.Preserved(), "attempt %d", i)
		// A write to a Disk, cut as well (3 ms on the device).
		sb = &draintest.Sandbox{Name: "sb", Bytes: 3 << 10, Disk: &draintest.Disk{Bandwidth: 1 << 20}}
		assert.ErrorIs(t, sb.Preserve(ctx), context.DeadlineExceeded, "attempt %d with a Disk", i)
		cancel()
	}

	// The Run's deadline comes 19 ms after its listing returned, not after its call: on
	// a busy machine the listing itself may take longer than 19 ms, and a listing cut by
	// the deadline lists nothing to cut (ListErr, no entries: 3 of 400 runs at load 15).
	node := draintest.NewNode()
	node.AddN("sb", 10, 20*time.Millisecond)
	var p *pause.Preserver
	listed := pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
		sbs, err := node.List(ctx)
		p.Tighten(time.Now().Add(19 * time.Millisecond)) // the phase deadline too
		return sbs, err
	})
	p, err := pause.New(listed, pause.Config{Limit: 10, CancelAtDeadline: true})
	require.NoError(t, err)
	rep := p.Run(t.Context(), time.Now().Add(time.Hour))
	require.Len(t, rep.Entries, 10, "listed before the deadline: %s", rep.ListErr)
	assert.Zero(t, rep.Counts[pause.Preserved], "%v", rep.Counts)
	assert.Equal(t, 10, rep.Lost(), "%v", rep.Counts) // timed out, or failed with ctx's error
	assert.Error(t, rep.Err())

	// Work that ends by its deadline is done, loaded or not.
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	assert.NoError(t, (&draintest.Sandbox{Name: "sb", Latency: 3 * time.Millisecond}).Preserve(ctx))
}

// In real time a write to a Disk ends when the device's rates say, on a busy machine
// too, as late as one wake of the goroutine at most. Fault: each of the write's 32
// chunks began when the goroutine woke from the one before, so every late wake added
// up: with one CPU taken, a write of 0.098 s alone on the device took 0.69-0.95 s
// (unloaded 0.10-0.11 s), and a user's real-time test over a Disk measured a device 7
// to 10 times slower than the one it set, the more so the busier the machine.
func TestDiskWriteKeepsTheDevicesTimeOnABusyMachine(t *testing.T) {
	busy(t)
	disk := &draintest.Disk{Bandwidth: 1 << 20}
	const model = time.Second * 100 / 1024 // 100 KiB at 1 MiB/s
	fastest := time.Duration(math.MaxInt64)
	for i := range 3 {
		sb := &draintest.Sandbox{Name: "sb", Bytes: 100 << 10, Disk: disk}
		start := time.Now()
		require.NoError(t, sb.Preserve(t.Context()))
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, model, "write %d", i)
		fastest = min(fastest, took)
	}
	// One late wake is a time slice (10 ms); the fastest of 3 writes leaves out a stall
	// of the machine itself in one of them; and 3 x the model is a third of what 32 late
	// wakes took.
	assert.Less(t, fastest, 3*model)
}
