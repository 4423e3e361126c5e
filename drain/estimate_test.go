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
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/kubeletsim"
	"github.com/drainkit/drainkit/pause"
)

// Sandboxes that estimate their own preserve (pause.Estimated, as a VM
// knows its memory size) are what the preserve phase's reserve counts on,
// as the Preserver orders and paces by them. Before, the reserve took only
// the Estimator's estimate (1 s before any preserve, with the zero Config):
// 16 sandboxes of 8 s each at 8 at a time need 16 s, the reserve said 2 s,
// the preStop wait ran until 53 s of the 60 s grace and all 16 were lost.
//
//	0 s     preStop; 16 running, each estimating 8 s; limit 8
//	39 s    drain deadline (55 s budget deadline - 2 rounds x 8 s): SIGTERM
//	55 s    both rounds done
func TestPreserveReserveCountsTheSandboxesOwnEstimates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, sandboxes: 0, limit: 8,
			edit: func(c *Config) { c.Pause.Estimator = nil }}) // the default: 1 s before any preserve
		for i := range 16 {
			f.node.Add(&fakesandbox.Sandbox{Name: "vm-" + string(rune('a'+i)), Latency: 8 * time.Second, Estimate: 8 * time.Second})
		}
		terminateAllPreserved(t, f, 16)
	})
}

// A Sized sandbox counts in the preserve reserve with its size at the rate
// the Preserver measured, as the Preserver orders and paces it. Before,
// it counted with the Estimator's estimate: after 1 GiB preserves of 1 s,
// 8 VMs of 8 GiB (8 s each, 8 at a time) were reserved 1 s, the preStop
// wait ran to 54 s of the 60 s grace and all 8 were lost.
//
//	before  4 x 1 GiB preserved in 1 s: 1 ns a byte, and the Estimator at 1 s
//	0 s     preStop; 8 running, 8 GiB each; limit 8
//	47 s    drain deadline (55 s budget deadline - 1 round x 8 s): SIGTERM
//	55 s    the round done
func TestPreserveReserveCountsSizedSandboxesAtTheMeasuredRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gib = 1 << 30
		node := fakesandbox.NewNode()
		for i := range 4 {
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprintf("small-%d", i), Latency: time.Second, Bytes: gib})
		}
		p, err := pause.New(node, pause.Config{Limit: 8})
		require.NoError(t, err)
		require.Equal(t, 4, p.Run(t.Context(), time.Time{}).Counts[pause.Preserved], "the rate is measured")
		for i := range 8 {
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprintf("vm-%d", i), Latency: 8 * time.Second, Bytes: 8 * gib})
		}
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, edit: func(c *Config) {
			c.Sandboxes, c.Preserver = node, p
		}})
		terminateAllPreserved(t, f, 8)
	})
}

// terminateAllPreserved has the simulated kubelet terminate f's node through
// its preStop hook with a 60 s grace, and checks that all n sandboxes were
// preserved before SIGKILL.
func terminateAllPreserved(t *testing.T, f *fixture, n int) {
	t.Helper()
	tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 60*time.Second)
	t.Logf("timeline:\n%s", tl)
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, n, rep.Preserve.Counts[pause.Preserved], "%v", rep.Preserve.Counts)
	assert.False(t, tl.Killed)
	assert.NoError(t, rep.Err())
}

// Before any preserve was measured (a server's first drain), a Run takes
// a Sized sandbox of the average size to take the Estimator's estimate,
// and a larger one longer in proportion; the preserve reserve counts the
// largest so, as its longest. Before, it counted each with the estimate:
// 1, 1, 1 and 29 GiB at 8 s for the average 8 GiB were reserved one round
// of 8 s, SIGTERM came at 46.7 s and the 29 GiB VM, started first, ran
// into SIGKILL.
//
//	0 s     preStop; 4 running (1, 1, 1, 29 GiB; 1 s a GiB); limit 8; estimate 8 s
//	25.7 s  drain deadline (55 s budget deadline - 29 s): SIGTERM
//	54.7 s  the 29 GiB VM done
func TestPreserveReserveCountsTheLargestSizedSandboxAtTheEstimatorsPrior(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gib = 1 << 30
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, latency: 8 * time.Second, limit: 8})
		for i, size := range []int64{1, 1, 1, 29} {
			f.node.Add(&fakesandbox.Sandbox{Name: fmt.Sprintf("vm-%d", i), Latency: time.Duration(size) * time.Second, Bytes: size * gib})
		}
		terminateAllPreserved(t, f, 4)
	})
}

// An Estimator that has observed nothing and estimates zero (the zero
// value, deadline.NewEstimator(0)) knows nothing of a preserve's time,
// as an unknown count says nothing of how many run. Before, the plan took
// its zero for instant preserves and reserved none: the preStop wait ran
// 1 s longer than with no Estimator given (pause's default starts at 1 s),
// and SIGTERM came with no time reserved to preserve.
//
//	0 s     preStop; 4 running, 1.2 s each, 4 at a time; grace 10 s
//	7.2 s   the wait ends (8.5 s budget deadline - 1 round at 1 s - 0.3 s):
//	        SIGTERM (was 8.2 s: SIGKILL at 10.2 s, the preserves cut at
//	        the budget's deadline, 9.2 s, all 4 lost)
//	8.4 s   the 4 preserved
func TestEstimatorThatHasSeenNothingPlansTheDefaultEstimate(t *testing.T) {
	for _, est := range []*deadline.Estimator{{}, deadline.NewEstimator(0)} {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t, fixtureOpts{grace: 10 * time.Second, sandboxes: 0, limit: 4,
				edit: func(c *Config) { c.Pause.Estimator = est }})
			for i := range 4 {
				f.node.Add(&fakesandbox.Sandbox{Name: fmt.Sprintf("sb-%d", i), Latency: 1200 * time.Millisecond})
			}
			tl, rep := f.terminate(t, kubeletsim.HandlerHook{Handler: f.d.PreStop(), Path: "/drain"}, 10*time.Second)
			t.Logf("timeline:\n%s", tl)
			assert.Equal(t, 7200*time.Millisecond, tl.SIGTERM.Sub(tl.Start), "the wait kept a round at the default estimate")
			require.NotNil(t, rep.Preserve)
			assert.Equal(t, 4, rep.Preserve.Counts[pause.Preserved], "lost: %d", rep.Lost())
		})
	}
}

// The estimate the plan counts for an Estimator that has seen nothing is
// pause's default Estimator's prior, which pause does not export: kept
// apart, the two would drift.
func TestUnknownPreserveIsPausesDefaultEstimate(t *testing.T) {
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil }), pause.Config{})
	require.NoError(t, err)
	assert.Equal(t, p.Estimator().Estimate(), unknownPreserve.Estimate())
}
