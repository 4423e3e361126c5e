package pause

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// feed gives c n samples of one second each at the limit it has, the
// level's throughput being rate(k) times a lognormal factor of sigma, and
// returns the limits it moved through.
func feed(c *climber, n int, sigma float64, rng *rand.Rand, rate func(k int) float64, now *time.Time) []int {
	var moves []int
	for range n {
		*now = now.Add(time.Second)
		k := c.k
		x := rate(k)
		if rng != nil {
			x *= math.Exp(sigma * rng.NormFloat64())
		}
		// a sample of 1 s at concurrency k moving x units per ns overall
		if got := c.sample(*now, time.Second, x*float64(time.Second)/float64(k), float64(k), 0, 1<<20, *now); got != k {
			moves = append(moves, got)
		}
	}
	return moves
}

// A doubling that pays by less than the noise does not move the limit
// after the epoch's four samples: the epoch goes on until the difference
// exceeds the noise or it has three times its samples. Without noise the
// same doubling is decided at four.
func TestClimberMeasuresOnWhileWithinTheNoise(t *testing.T) {
	rate := func(k int) float64 { return float64(min(k, 8)) } // knee at 8
	start := time.Unix(0, 0)

	quiet := newClimber(8, 32, start)
	now := start
	feed(quiet, 4, 0, rand.New(rand.NewPCG(1, 1)), rate, &now) // 8 -> 16
	assert.Equal(t, 16, quiet.k)
	assert.Equal(t, []int{4}, feed(quiet, 4, 0, nil, rate, &now), "16 does not pay: try fewer")

	// With noise (sigma 0.6) the same four samples are mostly no answer.
	undecided := 0
	for seed := range uint64(100) {
		noisy := newClimber(8, 32, start)
		now = start
		rng := rand.New(rand.NewPCG(seed, 2))
		feed(noisy, 4, 0.6, rng, rate, &now)
		assert.Equal(t, 16, noisy.k)
		if moved := feed(noisy, 4, 0.6, rng, rate, &now); len(moved) == 0 {
			undecided++
			assert.Equal(t, 4, noisy.epoch.n, "the epoch goes on")
		}
		feed(noisy, 8, 0.6, rng, rate, &now)
		assert.NotEqual(t, 16, noisy.k, "decided by twelve samples at the latest")
	}
	t.Logf("%d of 100 noisy epochs went on after four samples", undecided)
	assert.GreaterOrEqual(t, undecided, 40, "none without the rule")
}

// Holding at a level above the knee, the climber probes a quarter fewer
// every other probe and keeps the lower level when the higher one does not
// pay over it: a knee missed by an unlucky epoch is found again.
func TestClimberHoldingProbesDownward(t *testing.T) {
	rate := func(k int) float64 { return float64(min(k, 4)) } // flat from 4
	now := time.Unix(0, 0)
	c := newClimber(8, 32, now)
	c.hold(8)
	var moves []int
	for range 200 {
		moves = append(moves, feed(c, 4, 0, nil, rate, &now)...)
	}
	assert.Contains(t, moves, 10, "a probe upward")
	assert.Contains(t, moves, 6, "a probe downward, kept")
	assert.LessOrEqual(t, c.k, 5, "down to the knee, or a probe a quarter above it")
}

// sampleAt gives c n noiseless samples of one second at the limit it has,
// the node moving rate(k) units per second, with queued preserves queued.
func sampleAt(c *climber, n int, queued int, rate func(k int) float64, now *time.Time) {
	for range n {
		*now = now.Add(time.Second)
		k := c.k
		c.sample(*now, time.Second, rate(k)/float64(k)*float64(time.Second)/1e9, float64(k), 0, queued, *now)
	}
}

// With too little work queued for four rounds at the level held, a
// doubling that does not pay settles the limit on the better measured of
// the two levels instead of a search below them (whose finding would come
// too late to be used), and no probe follows; with enough work queued the
// climber searches below, as before.
func TestClimberWithLittleWorkLeftSettlesInsteadOfSearchingBelow(t *testing.T) {
	flat := func(k int) float64 { return 100 }                           // the knee is at 1 or below
	little := func(k int) float64 { return 100 + float64(min(k, 16))/4 } // 16 adds 2 %: not worth a doubling
	thrash := func(k int) float64 { return 800 / float64(k) }            // every preserve more costs
	for _, tc := range []struct {
		name   string
		rate   func(int) float64
		queued int
		want   int
	}{
		{"flat, work queued", flat, 1000, 4}, // 16 did not pay: halve from 8
		{"flat, four rounds at 16 queued", flat, 64, 4},
		{"flat, little work left", flat, 15, 8},
		{"a little more at 16, work queued", little, 1000, 4},
		{"a little more at 16, little work left", little, 15, 16},
		{"thrash, work queued", thrash, 1000, 4},
		{"thrash, little work left", thrash, 15, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(0, 0)
			c := newClimber(8, 32, now)
			sampleAt(c, 4, 1000, tc.rate, &now) // the first epoch doubles
			assert.Equal(t, 16, c.k)
			sampleAt(c, 4, tc.queued, tc.rate, &now)
			assert.Equal(t, tc.want, c.k)
			if tc.queued < 64 {
				assert.False(t, c.climbing())
				sampleAt(c, 4*holdEpochs*2, tc.queued, tc.rate, &now)
				assert.Equal(t, tc.want, c.k, "no probe with little work left")
			}
		})
	}
}
