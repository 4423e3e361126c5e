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
	quota       = 5 * time.Millisecond    // of each period: 5 % of a CPU
	childWatch  = 10 * time.Second        // how long the child waits for its call before it says it never ended
	slackBound  = 1500 * time.Millisecond // the slack's 100 ms at most in wall time: its wall bound, a second and four times it, and the rest of it
)

// hangEnd is how the child's hung call ended.
type hangEnd struct {
	Abandoned bool
	Err       string
	After     time.Duration // from the call's deadline to its end
	Ended     bool          // within childWatch
}

// Fault: the slack counted only the stretches its waiter saw end on time
// (row 3020), with no bound in wall time: in a process at its CPU quota
// whose threads use it up (a pod at its CPU limit; here 5 ms of every
// 100 ms), every 5 ms stretch ends while the kernel has stopped the
// process until its next period and is seen some 95 ms late, counting
// nothing, so a call that ignores its context was never abandoned: drain
// waited on it past SIGKILL, its later steps (the ublk teardown) never
// began. The slack now lasts at most its wall bound (a second and four
// times it: 1.4 s for drain's 100 ms), then the rest of it in one last
// stretch (row 3320): 1.5 s in all. Waited on
// from the deadline, the waiter sees each of its three ends (the
// context's, the bound's, the last stretch's) at most a period late, and
// the loaded machine's scheduler holds it a little more: at most a period.
//
//	0          the child, in a cgroup allowed 5 ms of CPU every 100 ms, keeps its
//	           quota used up (busy goroutines) and calls a function that ignores
//	           its context, 100 ms of slack; the deadline 50 ms later
//	+1.4 s     the slack's wall bound: its last stretch, the rest of its 100 ms
//	+1.5 s     the last stretch's end
//	≤ +1.9 s   the call abandoned
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
	assert.LessOrEqual(t, hung.After, slackBound+4*quotaPeriod, "from the call's deadline to its end")
	t.Logf("abandoned %v after its deadline", hung.After)
}

// runThrottledChild joins the CPU quota at procs, keeps it used up (a
// busy goroutine: the rest of the process's work), and calls a function
// that ignores its context, with the slack of drain's waits; then how
// that call ended.
func runThrottledChild(t *testing.T, procs string) {
	require.NoError(t, proctest.JoinCgroup(procs))
	var stop atomic.Bool
	var spun sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		spun.Go(func() {
			for !stop.Load() {
				runtime.Gosched()
			}
		})
	}
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
	j, err := json.Marshal(end)
	require.NoError(t, err)
	fmt.Printf("hung %s\n", j)
}
