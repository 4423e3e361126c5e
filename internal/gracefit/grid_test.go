package gracefit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/gracefit"
)

// The bisection assumes a longer grace never fits less; over a grid of the
// edges (margins default, 300 ms and 2 s; sleeps none to 20 s; one round
// of 100 ms to 40 s) Smallest is the first whole second, counted up from
// 1 s, whose Shortfall is zero, and none before it fits; SmallestNode is
// the same for the kubelet's own grace under a pod's grace of 60 s.
func TestSmallestIsTheFirstGraceThatFits(t *testing.T) {
	for _, margin := range []time.Duration{0, 300 * time.Millisecond, 2 * time.Second} {
		for _, sleep := range []time.Duration{0, time.Second, 3 * time.Second, 20 * time.Second} {
			for round := 100 * time.Millisecond; round < 40*time.Second; round += 700 * time.Millisecond {
				c := deadline.Config{Margin: margin, PreStopSleep: sleep}
				at := func(*deadline.Budget) []deadline.Phase {
					return []deadline.Phase{{Name: "drain"}, {Name: "gate", Max: 10 * time.Second},
						{Name: "preserve", Reserve: deadline.Fixed(round)}, {Name: "ublk", Reserve: deadline.Fixed(time.Second), Critical: true}}
				}
				where := func() string {
					return "margin " + margin.String() + ", sleep " + sleep.String() + ", round " + round.String()
				}
				assert.Equal(t, firstThat(func(g time.Duration) bool { return gracefit.Shortfall(g, c, at) == 0 }),
					gracefit.Smallest(c, at), where())
				assert.Equal(t, firstThat(func(k time.Duration) bool { return gracefit.NodeShortfall(60*time.Second, k, c, at) == 0 }),
					gracefit.SmallestNode(60*time.Second, c, at), "the kubelet's own: "+where())
			}
		}
	}
}

// firstThat counts up whole seconds from 1 s to 2 min and returns the
// first for which fits holds, or 0.
func firstThat(fits func(time.Duration) bool) time.Duration {
	for g := time.Second; g <= 2*time.Minute; g += time.Second {
		if fits(g) {
			return g
		}
	}
	return 0
}
