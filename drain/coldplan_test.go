package drain

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// A cold node's first drain: the limit adapts (none set) and nothing has
// measured what preserves at once deliver on this node. Eight sandboxes
// pause to a disk that writes two at full speed: each takes 1 s alone, 4 s
// when all eight write at once. The plan used to count the climb's start
// (8) as a measured speedup: one round of 1 s. The preStop wait ran to
// 15.7 s, the eight pauses started at once at a quarter speed, and all
// were cut at the preserve phase's deadline, 2 s later:
//
//	0 s preStop .... 15.7 s SIGTERM, preserve (1 s reserved) ... 17.7 s: 0 of 8
//
// A plan counts only on parallelism measured (a drain before on this node,
// a Run before in this process) or set (a fixed Config.Limit): before, one
// preserve at a time, 8 x 1 s = 8 s.
//
//	0 s preStop ... 8.7 s SIGTERM, preserve (8 s reserved) ... 12.7 s: 8 of 8
func TestColdPlanCountsNoUnmeasuredParallelism(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, alone = 8, time.Second
		b, err := deadline.New(20*time.Second, deadline.Config{Margin: 2 * time.Second})
		require.NoError(t, err)
		disk := &draintest.Disk{Bandwidth: 2e9, PerWriter: 1e9}
		node := draintest.NewNode()
		for i := range n {
			node.Add(&draintest.Sandbox{Name: fmt.Sprintf("sb%d", i), Bytes: 1e9, Disk: disk})
		}
		var ran []string
		d, err := New(Config{Budget: b, Sandboxes: node,
			Pause: pause.Config{Estimator: deadline.NewEstimator(alone)},
			Steps: []Step{stepOf("ublk", time.Second, true, func(context.Context) error {
				ran = append(ran, "ublk")
				return nil
			})}})
		require.NoError(t, err)
		t0 := time.Now()

		call := (&fixture{d: d}).callPreStop(t.Context(), "")
		sum := call.wait(t)
		assert.Equal(t, reasonDeadline, sum.Reason)
		assert.Equal(t, 17*time.Second-n*alone-sigtermLag, call.at.Sub(t0),
			"the wait leaves 8 pauses one at a time before the critical step's 1 s reserve")

		rep := d.Shutdown(context.Background())
		for _, p := range rep.Phases {
			t.Logf("%s %v-%v dl %v hard %v", p.Name, p.Start.Sub(t0), p.End.Sub(t0), p.Deadline.Sub(t0), p.Hard.Sub(t0))
		}
		assert.Equal(t, n, rep.Preserve.Counts["preserved"], "every sandbox preserved")
		assert.Equal(t, 8, node.MaxInFlight(), "the Run itself still starts at the climb's start")
		assert.Equal(t, []string{"ublk"}, ran)
		require.NoError(t, rep.Err())
	})
}
