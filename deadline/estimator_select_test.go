package deadline

import (
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
