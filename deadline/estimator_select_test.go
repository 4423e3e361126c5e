package deadline

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// testWindow returns a window of 1 + trial%estimatorWindow observations:
// by trial, many ties, a descending run, an ascending run, or random values.
func testWindow(rng *rand.Rand, trial int) []time.Duration {
	n := 1 + trial%estimatorWindow
	s := make([]time.Duration, n)
	for i := range s {
		switch trial % 4 {
		case 0:
			s[i] = time.Duration(rng.IntN(5)) // many ties
		case 1:
			s[i] = time.Duration(n - i) // descending
		case 2:
			s[i] = time.Duration(i) // ascending: every element enters topRank's list
		default:
			s[i] = time.Duration(rng.Int64N(1e9))
		}
	}
	return s
}

// selectRank agrees with sorting for every rank, and topRank for every k
// it is used for, of windows with ties, runs in both directions and random
// values; topRank leaves the window as it was.
func TestRanksAgreeWithSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 600 {
		s := testWindow(rng, trial)
		n := len(s)
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		for k := range n {
			if got := selectRank(slices.Clone(s), k); got != sorted[k] {
				t.Fatalf("trial %d: rank %d of %v: got %v, want %v", trial, k, s, got, sorted[k])
			}
		}
		orig := slices.Clone(s)
		for k := 1; k <= min(n, topMax); k++ {
			if got, want := topRank(s, k), sorted[n-k]; got != want {
				t.Fatalf("trial %d: %d-th largest of %v: got %v, want %v", trial, k, orig, got, want)
			}
		}
		if !slices.Equal(s, orig) {
			t.Fatalf("trial %d: topRank reordered the window", trial)
		}
	}
}

// topRank gives the answer the one loop it was before stop 57's review
// gave (topRankOneLoop), for every k it is used for, over random windows
// of every length: random values over the whole range of a Duration,
// negative ones and both extremes included, few distinct values (ties),
// and runs in both directions (testWindow). Its two loops are a cheaper
// way to the same answer, not a new one.
func TestTopRankAnswersAsItsOneLoopDid(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 58))
	extremes := []time.Duration{math.MinInt64, -1, 0, 1, math.MaxInt64}
	for trial := range 20_000 {
		var s []time.Duration
		if trial%2 == 0 {
			s = testWindow(rng, trial/2)
		} else {
			s = make([]time.Duration, 1+rng.IntN(estimatorWindow))
			for i := range s {
				s[i] = time.Duration(rng.Uint64())
				if rng.IntN(8) == 0 {
					s[i] = extremes[rng.IntN(len(extremes))]
				}
			}
		}
		for k := 1; k <= min(len(s), topMax); k++ {
			if got, want := topRank(s, k), topRankOneLoop(s, k); got != want {
				t.Fatalf("trial %d: %d-th largest of %v: got %v, the one loop %v", trial, k, s, got, want)
			}
		}
	}
}

// topRankOneLoop is topRank as it was until stop 57's review: one loop
// that asked each element whether its list of the largest was full yet.
func topRankOneLoop(s []time.Duration, k int) time.Duration {
	var top [topMax]time.Duration // the largest seen, in descending order
	m := 0                        // how many of top are filled
	for _, v := range s {
		if m == k && v <= top[k-1] {
			continue
		}
		j := k - 1 // v replaces the smallest kept
		if m < k {
			j = m
			m++
		}
		for ; j > 0 && top[j-1] < v; j-- {
			top[j] = top[j-1]
		}
		top[j] = v
	}
	return top[k-1]
}

// BenchmarkQuantileOfFreshWindows compares the two ways the 90th
// percentile of a full window is found (its 7th largest), over 256
// different windows in turn, as a pass's Estimate sees a window its
// preserves changed: a single window repeated would let the branch
// predictor learn quickselect's branches.
//
//	go test -run '^$' -bench QuantileOfFreshWindows ./deadline
func BenchmarkQuantileOfFreshWindows(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var ws [256][estimatorWindow]time.Duration
	for w := range ws {
		for i := range ws[w] {
			ws[w][i] = time.Duration(rng.Int64N(1e6))
		}
	}
	var sink time.Duration
	b.Run("selectRank", func(b *testing.B) {
		i := 0
		for b.Loop() {
			s := ws[i%len(ws)] // the copy quantileLocked makes
			sink += selectRank(s[:], estimatorWindow-7)
			i++
		}
	})
	b.Run("topRank", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sink += topRank(ws[i%len(ws)][:], 7)
			i++
		}
	})
	_ = sink
}
