package deadline

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// selectRank agrees with sorting for every rank of windows with ties,
// runs and random values.
func TestSelectRankAgreesWithSorting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		n := 1 + trial%estimatorWindow
		s := make([]time.Duration, n)
		for i := range s {
			switch trial % 3 {
			case 0:
				s[i] = time.Duration(rng.IntN(5)) // many ties
			case 1:
				s[i] = time.Duration(n - i) // descending
			default:
				s[i] = time.Duration(rng.Int64N(1e9))
			}
		}
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		for k := range n {
			if got := selectRank(slices.Clone(s), k); got != sorted[k] {
				t.Fatalf("trial %d: rank %d of %v: got %v, want %v", trial, k, s, got, sorted[k])
			}
		}
	}
}
