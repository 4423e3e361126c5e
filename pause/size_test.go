package pause_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

const mib = 1 << 20

// sizedNode lists sandboxes of the given sizes in MiB whose preserve takes
// perMiB per MiB; none estimates its own time.
func sizedNode(perMiB time.Duration, sizes ...int64) (*fakesandbox.Node, []*fakesandbox.Sandbox) {
	node := fakesandbox.NewNode()
	sbs := make([]*fakesandbox.Sandbox, len(sizes))
	for i, s := range sizes {
		sbs[i] = &fakesandbox.Sandbox{Name: fmt.Sprint("sb-", i), Bytes: s * mib, Latency: time.Duration(s) * perMiB}
	}
	return node, node.Add(sbs...)
}

// With ample time, sizes order the pass longest first even before any
// preserve was measured: 2 slots, 16,16,16,16,64 MiB at 62.5 ms/MiB end in
// 4 s (64 | 16+16+16+16), where the Lister's order takes 6 s.
func TestSizesOrderLongestFirstWithAmpleTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node, sbs := sizedNode(62500*time.Microsecond, 16, 16, 16, 16, 64)
		p, err := pause.New(node, pause.Config{Limit: 2, Estimator: deadline.NewEstimator(time.Second)})
		require.NoError(t, err)
		rep, took := runFor(t, p, time.Hour, 0)
		require.Equal(t, 5, rep.Counts[pause.Preserved])
		assert.Equal(t, 4*time.Second, took)
		assert.Equal(t, sbs[4].Starts()[0], sbs[0].Starts()[0], "the 64 MiB one starts first")
		assert.Equal(t, int64(64*mib), rep.Entries[4].Size)
	})
}

// When the deadline binds, sizes order the pass shortest first: with the
// prior of 2 s for a sandbox of the average size (20 MiB; 8 x 1 MiB and
// 8 x 39 MiB), the 32 s of estimated work do not fit in 6 s at one slot,
// so the eight 1 MiB ones go first (0.1 s each), then one 39 MiB one
// (3.9 s): 9 preserved, where longest first would have preserved one.
func TestSizesOrderShortestFirstWhenTheDeadlineBinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sizes := []int64{39, 1, 39, 1, 39, 1, 39, 1, 39, 1, 39, 1, 39, 1, 39, 1}
		node, sbs := sizedNode(100*time.Millisecond, sizes...)
		p, err := pause.New(node, pause.Config{Limit: 1, Estimator: deadline.NewEstimator(2 * time.Second)})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 6*time.Second, 0)
		for i, sb := range sbs {
			if sizes[i] == 1 {
				assert.True(t, sb.Preserved(), "the 1 MiB sandbox %d", i)
			}
		}
		assert.Equal(t, 9, rep.Counts[pause.Preserved], "8 small ones in 0.8 s, then one of 3.9 s")
		assert.Equal(t, 100*time.Millisecond, rep.Entries[1].Estimate, "1 MiB of an average 20 MiB: 1/20 of the 2 s prior")
	})
}

// The measured rate refines the size prior: after a Run measured 0.1 s per
// MiB, the next Run estimates each sandbox at its size times that, however
// wrong the prior was.
func TestMeasuredRateRefinesSizeEstimates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node, _ := sizedNode(100*time.Millisecond, 10, 30)
		est := deadline.NewEstimator(time.Hour) // a wildly wrong prior
		p, err := pause.New(node, pause.Config{Limit: 1, Estimator: est})
		require.NoError(t, err)
		rep, _ := runFor(t, p, 24*time.Hour, 0)
		require.Equal(t, 2, rep.Counts[pause.Preserved])
		assert.Equal(t, 30*time.Minute, rep.Entries[0].Estimate, "prior: 10 MiB of an average 20 MiB x 1 h")

		node.Add(&fakesandbox.Sandbox{Name: "late", Bytes: 50 * mib, Latency: 5 * time.Second})
		rep, _ = runFor(t, p, time.Hour, 0)
		require.Equal(t, 1, rep.Counts[pause.Preserved])
		assert.Equal(t, 5*time.Second, rep.Entries[0].Estimate.Round(time.Millisecond))
	})
}

// Sizes before anything was measured rank the pass with the default
// Estimator's prior (1 s, the default Estimator's start, for an average-sized sandbox): with
// ample time, longest first.
func TestSizesWithTheDefaultPriorRankLongestFirstWithAmpleTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node, sbs := sizedNode(100*time.Millisecond, 30, 10, 20)
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Hour, 0)
		require.Equal(t, 3, rep.Counts[pause.Preserved])
		assert.True(t, sbs[0].Starts()[0].Before(sbs[2].Starts()[0]))
		assert.True(t, sbs[2].Starts()[0].Before(sbs[1].Starts()[0]))
		assert.Equal(t, 1500*time.Millisecond, rep.Entries[0].Estimate, "30 MiB of an average 20 MiB x the 1 s prior")
	})
}

// SizeEstimate says nothing before a Sized sandbox was measured, and
// after, a size's time at the rate measured.
func TestSizeEstimateIsTheMeasuredRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node, _ := sizedNode(10*time.Millisecond, 100, 100)
		p, err := pause.New(node, pause.Config{Limit: 2})
		require.NoError(t, err)
		_, ok := p.SizeEstimate(100 * mib)
		assert.False(t, ok, "nothing measured yet")
		require.Equal(t, 2, p.Run(t.Context(), time.Time{}).Counts[pause.Preserved])
		d, ok := p.SizeEstimate(800 * mib)
		require.True(t, ok)
		assert.Equal(t, 8*time.Second, d.Round(time.Millisecond), "10 ms a MiB")
		_, ok = p.SizeEstimate(0)
		assert.False(t, ok, "an unknown size")
	})
}

// A sandbox whose Size is cgroup v1's "no limit" (memory.limit_in_bytes
// of an unlimited cgroup: 9223372036854771712, a server taking its memory
// limit for its size) is the longest of a pass, not the shortest: at the
// rate a Run measured (2 s a GiB), its time overflowed a Duration, which
// read as 1 ns, and with the deadline binding it started first and held
// the one slot to the deadline.
//
//	Run 1: 1 GiB in 2 s, the rate measured
//	Run 2, limit 1, phase 9 s: five 1 GiB sandboxes (2 s each) and "unlimited" (20 s)
//	before: "unlimited" first, timed out at 9 s, none preserved
//	after:  four preserved by 8 s, the fifth cut at 9 s, "unlimited" not started
func TestASizeBeyondAnyTimeIsTheLongestOfThePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gib = 1 << 30
		node, _ := sizedNode(2*time.Second/1024, 1024)
		p, err := pause.New(node, pause.Config{Limit: 1})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		require.Equal(t, 1, rep.Counts[pause.Preserved])

		const noLimit = 9223372036854771712
		node.Add(&fakesandbox.Sandbox{Name: "unlimited", Bytes: noLimit, Latency: 20 * time.Second})
		for i := range 5 {
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("gib-", i), Bytes: gib, Latency: 2 * time.Second})
		}
		rep, took := runFor(t, p, 9*time.Second, 0)
		assert.Equal(t, 4, rep.Counts[pause.Preserved])
		assert.Equal(t, pause.NotStarted, entry(t, rep, "unlimited").Outcome)
		assert.Greater(t, entry(t, rep, "unlimited").Estimate, 100*365*24*time.Hour, "longer than any phase")
		assert.Equal(t, 9*time.Second, took)
	})
}
