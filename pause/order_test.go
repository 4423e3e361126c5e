package pause_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// runFor runs p under a fresh phase deadline of left and returns the report
// and how long Run took.
func runFor(t *testing.T, p *pause.Preserver, left time.Duration, hard time.Duration) (*pause.Report, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), left)
	defer cancel()
	var h time.Time
	if hard > 0 {
		h = time.Now().Add(hard)
	}
	start := time.Now()
	rep := p.Run(ctx, h)
	return rep, time.Since(start)
}

// mixedNode lists 40 sandboxes alternating 9 s and 1 s preserves.
func mixedNode() *fakesandbox.Node {
	node := fakesandbox.NewNode()
	for i := range 40 {
		d := 9 * time.Second
		if i%2 == 1 {
			d = time.Second
		}
		node.Add(&fakesandbox.Sandbox{Name: fmt.Sprintf("sb-%d", i), Latency: d, Estimate: d})
	}
	return node
}

// With 10.5 s for 40 sandboxes (20 x 9 s, 20 x 1 s, alternating) at limit
// 4, the deadline binds. Shortest first, asked for, picks the set that
// fits in 4 x 10.5 s (the 20 short ones and two long ones) and packs it:
// the two 9 s preserves on two slots, the 1 s ones on the other two and
// then after the long ones, 22 preserved by 10 s. Auto takes plain
// shortest first, which trusts only the ranks: the 20 short ones by 5 s,
// then four 9 s ones that end too late: 20. FIFO spends its slots on long
// ones and preserves 7 (1,1,1 by t2; 9,9 at t9; 9 and 1 at t10).
func TestBindingDeadlineShortestFirstPreservesMore(t *testing.T) {
	count := func(o pause.Order) int {
		var n int
		synctest.Test(t, func(t *testing.T) {
			p, err := pause.New(mixedNode(), pause.Config{Limit: 4, Order: o})
			require.NoError(t, err)
			rep, _ := runFor(t, p, 10500*time.Millisecond, 0)
			assert.Len(t, rep.Entries, 40)
			n = rep.Counts[pause.Preserved]
		})
		return n
	}
	fifo, shortest, auto := count(pause.OrderFIFO), count(pause.OrderShortestFirst), count(pause.OrderAuto)
	t.Logf("preserved with 10.5 s left: FIFO %d, shortest first %d, auto %d", fifo, shortest, auto)
	assert.Equal(t, 22, shortest)
	assert.Equal(t, 7, fifo)
	assert.Equal(t, 20, auto, "auto picks plain shortest first when the deadline binds")
}

// When everything fits, longest first ends sooner: 2 slots, 1,1,1,1,4 s.
// FIFO: 1+1 | 1+1 | then 4 = 6 s; LPT: 4 | 1+1+1+1 = 4 s.
func TestAmpleTimeLongestFirstEndsSooner(t *testing.T) {
	took := func(o pause.Order) time.Duration {
		var d time.Duration
		synctest.Test(t, func(t *testing.T) {
			node := fakesandbox.NewNode()
			for i, s := range []int{1, 1, 1, 1, 4} {
				lat := time.Duration(s) * time.Second
				node.Add(&fakesandbox.Sandbox{Name: fmt.Sprint(i), Latency: lat, Estimate: lat})
			}
			p, err := pause.New(node, pause.Config{Limit: 2, Order: o})
			require.NoError(t, err)
			rep, elapsed := runFor(t, p, time.Hour, 0)
			assert.Equal(t, 5, rep.Counts[pause.Preserved])
			d = elapsed
		})
		return d
	}
	assert.Equal(t, 6*time.Second, took(pause.OrderFIFO))
	assert.Equal(t, 4*time.Second, took(pause.OrderLongestFirst))
	assert.Equal(t, 4*time.Second, took(pause.OrderAuto), "auto picks longest first when time is ample")
}

// Without any estimate, auto keeps the Lister's order, and a priority
// always goes first.
func TestUnknownEstimatesKeepListOrderAfterPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		var sbs []*fakesandbox.Sandbox
		for i := range 6 {
			sbs = append(sbs, &fakesandbox.Sandbox{Name: fmt.Sprint(i), Latency: time.Second})
		}
		sbs[5].Prio = 10
		node.Add(sbs...)
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Hour, 0)
		require.Equal(t, 6, rep.Counts[pause.Preserved])
		first := sbs[5].Starts()[0]
		for i := range 5 {
			assert.True(t, sbs[i].Starts()[0].After(first), "priority 10 starts before %d", i)
			if i > 0 {
				assert.True(t, sbs[i].Starts()[0].After(sbs[i-1].Starts()[0]), "list order kept")
			}
		}
	})
}

// Sandboxes without an estimate of their own are estimated by the
// Estimator, which learns from every preserve.
func TestEstimatorIsFedAndUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		for i := range 10 {
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprint(i), Latency: 3 * time.Second})
		}
		est := deadline.NewEstimator(0)
		p, err := pause.New(node, pause.Config{Limit: 2, Estimator: est})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Hour, 0)
		assert.Equal(t, 10, rep.Counts[pause.Preserved])
		assert.Equal(t, 10, est.Count())
		assert.Equal(t, 3*time.Second, est.Estimate())
	})
}

// 200 x 2 s in 31 s at limit 4 needs 100 s. Waiting preserves scale
// without a knee. Given Limit 4 with a MaxLimit (a level learned on a node
// whose knee was 4), the first epoch runs at 8 and its preserves keep to
// their 2 s estimates: 8 is below the knee, the node is not the one that
// learned 4, and the limit doubles every epoch (4 samples, one round of
// 2 s) up to the maximum: 8+16 by 4 s, then 176 at 32, 16 s in all.
// Without a maximum the limit stays 4 and 60 are preserved.
func TestAdaptiveLimitClimbsWhileThroughputScales(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.AddN("sb", 200, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 4, MaxLimit: 32, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		rep, took := runFor(t, p, 31*time.Second, 0)
		assert.Equal(t, 200, rep.Counts[pause.Preserved])
		assert.Equal(t, []string{"16", "32"}, limitsTaken(buf.String()))
		assert.Equal(t, 32, p.Limit())
		assert.Equal(t, 32, rep.Limit)
		assert.Equal(t, 32, node.MaxInFlight())
		assert.Equal(t, 16*time.Second, took)
	})
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 200, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 4})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 31*time.Second, 0)
		assert.Equal(t, 60, rep.Counts[pause.Preserved])
		assert.Equal(t, 4, p.Limit())
	})
}

// With a MaxLimit of 8 the first epoch runs at 8, the ceiling; its
// preserves keep to their 2 s estimates, so the start of 2 is not taken,
// and the deadline binds (200 x 2 s need 50 s at 8): five rounds of 8 by
// 10 s, the sixth cut at 11 s, never above the maximum.
func TestAdaptiveLimitNeverExceedsMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 200, 2*time.Second)
		p, err := pause.New(node, pause.Config{Limit: 2, MaxLimit: 8})
		require.NoError(t, err)
		assert.Equal(t, 2, p.Limit(), "a reserve counts on the learned 2 until a Run tested it")
		rep, _ := runFor(t, p, 11*time.Second, 0)
		assert.Equal(t, 8, p.Limit())
		assert.Equal(t, 8, node.MaxInFlight())
		assert.Equal(t, 40, rep.Counts[pause.Preserved])
		assert.Equal(t, 200, len(rep.Entries))
	})
}
