package pause_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// The schedule-quality scenario: 500 sandboxes whose preserve times are
// lognormal (median 2 s, sigma 0.75, fixed seed) and known in advance,
// preserved 16 at a time.
const (
	qualityN     = 500
	qualityLimit = 16
)

func qualityDurations() []time.Duration {
	rng := rand.New(rand.NewPCG(413, 764))
	d := make([]time.Duration, qualityN)
	for i := range d {
		secs := 2 * math.Exp(0.75*rng.NormFloat64())
		d[i] = time.Duration(secs * float64(time.Second)).Round(time.Millisecond)
	}
	return d
}

// A quality is how one Run compares with what no schedule can beat.
type quality struct {
	makespan, lower       time.Duration // ample time: Run's duration, max(max p, sum p / K)
	preserved, upperBound int           // binding deadline: preserved, largest k whose k shortest fit in K x D
	deadline              time.Duration
}

func (q quality) makespanRatio() float64 { return float64(q.makespan) / float64(q.lower) }
func (q quality) countRatio() float64    { return float64(q.preserved) / float64(q.upperBound) }

// measureQuality runs the scenario twice in virtual time: with ample time
// (the makespan counts) and with a deadline of half the ideal makespan
// (the count preserved counts). It must run inside a synctest bubble.
func measureQuality(t *testing.T) quality {
	durs := qualityDurations()
	var sum, longest time.Duration
	for _, d := range durs {
		sum += d
		longest = max(longest, d)
	}
	q := quality{lower: max(longest, sum/qualityLimit)}
	q.deadline = sum / qualityLimit / 2

	run := func(left time.Duration) (*pause.Report, time.Duration) {
		node := fakesandbox.NewNode()
		for i, d := range durs {
			node.Add(&fakesandbox.Sandbox{Name: fmt.Sprint(i), Latency: d, Estimate: d})
		}
		p, err := pause.New(node, pause.WithLimit(qualityLimit))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), left)
		defer cancel()
		start := time.Now()
		rep := p.Run(ctx, time.Time{})
		return rep, time.Since(start)
	}
	rep, took := run(time.Hour)
	require.Equal(t, qualityN, rep.Counts[pause.Preserved])
	q.makespan = took

	rep, _ = run(q.deadline)
	q.preserved = rep.Counts[pause.Preserved]
	sorted := slices.Clone(durs)
	slices.Sort(sorted)
	var acc time.Duration
	for _, d := range sorted {
		if acc += d; acc > qualityLimit*q.deadline {
			break
		}
		q.upperBound++
	}
	return q
}

// Longest first with ample time ends within 5 % of the lower bound;
// shortest first under a binding deadline preserves at least 98 % of the
// upper bound.
func TestScheduleQuality(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := measureQuality(t)
		t.Logf("ample time: makespan %v, lower bound %v, ratio %.4f", q.makespan, q.lower, q.makespanRatio())
		t.Logf("deadline %v: preserved %d, upper bound %d, ratio %.4f", q.deadline, q.preserved, q.upperBound, q.countRatio())
		assert.LessOrEqual(t, q.makespanRatio(), 1.05)
		assert.GreaterOrEqual(t, q.countRatio(), 0.98)
	})
}

// BenchmarkScheduleQuality reports the schedule-quality ratios of the same
// scenario (virtual time: the figures do not depend on the machine). A
// benchmark has no *testing.T for synctest, so it runs the measurement as
// a test of its own through testing.RunTests.
func BenchmarkScheduleQuality(b *testing.B) {
	var q quality
	for b.Loop() {
		ok := testing.RunTests(func(_, _ string) (bool, error) { return true, nil },
			[]testing.InternalTest{{Name: "ScheduleQuality", F: func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { q = measureQuality(t) })
			}}})
		if !ok {
			b.Fatal("schedule-quality scenario failed")
		}
	}
	b.ReportMetric(q.makespanRatio(), "makespan/lower-bound")
	b.ReportMetric(q.countRatio(), "preserved/upper-bound")
	b.ReportMetric(float64(q.preserved), "preserved")
	b.ReportMetric(float64(q.upperBound), "upper-bound")
}
