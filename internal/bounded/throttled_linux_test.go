package bounded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/proc/proctest"
)

// throttledChild names, in the environment of this test binary run again,
// the call it makes in a process at its CPU quota; throttledProcs, the
// cgroup.procs file of that quota.
const (
	throttledChild = "DRAINKIT_BOUNDED_THROTTLED_CHILD"
	throttledProcs = "DRAINKIT_BOUNDED_THROTTLED_PROCS"
)

const (
	quotaPeriod = 100 * time.Millisecond  // the kernel's default CFS period
	quota       = 2 * time.Millisecond    // of each period: 2 % of a CPU
	childWatch  = 10 * time.Second        // how long the child waits for its call before it says it never ended
	slackBound  = 1500 * time.Millisecond // the slack's 100 ms at most in wall time: its wall bound, a second and four times it, and the rest of it
	pulseEvery  = time.Millisecond        // how often the child's pulse wakes to see how late it runs
)

// hangEnd is how the child's hung call ended.
type hangEnd struct {
	Abandoned bool
	Err       string
	After     time.Duration // from the call's deadline to its end
	Ended     bool          // within childWatch
	Held      time.Duration // the longest the child's pulse went between two wakes: how late the child ran
}

// Fault: the slack counted only the stretches its waiter saw end on time
// (row 3020), with no bound in wall time: in a process at its CPU quota
// whose threads use it up (a pod at its CPU limit; here 2 ms of every
// 100 ms), every 5 ms stretch ends while the kernel has stopped the
// process until its next period and is seen some 95 ms late, counting
// nothing, so a call that ignores its context was never abandoned: drain
// waited on it past SIGKILL, its later steps (the ublk teardown) never
// began. The slack now lasts at most its wall bound (a second and four
// times it: 1.4 s for drain's 100 ms), then the rest of it in one last
// stretch (row 3320): 1.5 s in all, each of its ends seen as late as the
// process runs (the package's doc). How late that is, the kernel decides,
// not the slack: a period late at the quota alone, two or three where a
// run past the quota (to the next 4 ms tick) is paid back from the next
// periods, more where the throttled process, its period come, waits for
// a CPU. So the test no longer asserts a period a wake (row 3460): the
// child measures how late it runs, with a pulse that wakes every
// millisecond, and the test asserts the promise in that: the context's
// end, the first wake past the bound (a stretch past it at most), the
// last stretch's end and the child's receipt of the call's end, each seen
// at most the longest the pulse was held.
//
// The quota is shorter than a stretch, so that no stretch fits in what
// the child runs of a period, as with a quota that its threads, on
// several CPUs, use up faster than a stretch: on its one P (below) 5 ms
// of every 100 ms let a stretch end on time now and then, and a hung call
// was abandoned at 2.5 s without the wall bound.
//
//	0          the child, in a cgroup allowed 2 ms of CPU every 100 ms, keeps its
//	           quota used up (a busy goroutine) and calls a function that ignores
//	           its context, 100 ms of slack; the deadline 50 ms later
//	+1.4 s     the slack's wall bound: its last stretch, the rest of its 100 ms
//	+1.5 s     the last stretch's end
//	≤ +1.505 s and 4 holds (100–300 ms each at the quota): the call abandoned
func TestAHungCallInAProcessAtItsCPUQuotaIsAbandonedWithinTheWallBound(t *testing.T) {
	if os.Getenv(throttledChild) != "" {
		runThrottledChild(t, os.Getenv(throttledProcs))
		return
	}
	t.Setenv(throttledProcs, proctest.CPUQuota(t, quota, quotaPeriod))
	child := proctest.Again(t, throttledChild)
	var hung hangEnd
	child.Decode(t, map[string]any{"hung": &hung})
	require.True(t, hung.Ended, "the hung call had not ended %v after its deadline", childWatch)
	assert.True(t, hung.Abandoned, hung.Err)
	require.Greater(t, hung.Held, stretch+jitter, "the quota held the child longer than a stretch can count")
	assert.LessOrEqual(t, hung.After, slackBound+stretch+4*hung.Held,
		"from the call's deadline to its end: the slack's wall bound and its rest, a stretch, and 4 ends each seen at most %v late", hung.Held)
	t.Logf("abandoned %v after its deadline, the child held up to %v", hung.After, hung.Held)
}

// runThrottledChild joins the CPU quota at procs, keeps it used up (a
// busy goroutine: the rest of the process's work), and calls a function
// that ignores its context, with the slack of drain's waits; then how
// that call ended, and the longest its process was held.
//
// The child runs on one P (GOMAXPROCS=1), as the frozen children do: the
// pulse sees how late the goroutines of its own thread run, and the
// wait's are those only on one P; on a loaded host the kernel can hold
// one thread of a process while another runs on (the package's doc).
func runThrottledChild(t *testing.T, procs string) {
	runtime.GOMAXPROCS(1)
	require.NoError(t, proctest.JoinCgroup(procs))
	var stop atomic.Bool
	var held atomic.Int64
	var spun sync.WaitGroup
	spun.Go(func() {
		for !stop.Load() {
			runtime.Gosched()
		}
	})
	spun.Go(func() { pulse(&stop, &held) })
	defer func() { stop.Store(true); spun.Wait() }()
	release := make(chan struct{})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	dl, _ := ctx.Deadline()
	ended := make(chan error, 1)
	go func() { ended <- Run(ctx, slack, func(context.Context) error { <-release; return nil }) }()
	var end hangEnd
	select {
	case err := <-ended:
		end = hangEnd{Abandoned: errors.Is(err, ErrAbandoned), Err: fmt.Sprint(err), After: time.Since(dl), Ended: true}
		close(release)
	case <-time.After(childWatch):
		close(release)
		<-ended
	}
	end.Held = time.Duration(held.Load())
	j, err := json.Marshal(end)
	require.NoError(t, err)
	fmt.Printf("hung %s\n", j)
}

// pulse wakes every pulseEvery until stop and keeps in held the longest
// it saw pass between two of its wakes: the longest its thread was not
// run.
func pulse(stop *atomic.Bool, held *atomic.Int64) {
	prev := time.Now()
	for !stop.Load() {
		time.Sleep(pulseEvery)
		now := time.Now()
		if gap := int64(now.Sub(prev)); gap > held.Load() {
			held.Store(gap)
		}
		prev = now
	}
}
