package deadline_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/deadline"
)

func TestEstimatorPriorUntilFirstObservation(t *testing.T) {
	e := deadline.NewEstimator(2 * time.Second)
	assert.Equal(t, 2*time.Second, e.Estimate())
	assert.Equal(t, 2*time.Second, e.Mean())
	assert.Equal(t, 2*time.Second, e.Quantile(0.9))
	assert.Zero(t, e.Count())
	e.Observe(500 * time.Millisecond)
	assert.Equal(t, 500*time.Millisecond, e.Estimate(), "the first observation replaces the prior")
	assert.Equal(t, 1, e.Count())

	assert.Zero(t, deadline.NewEstimator(-time.Second).Estimate(), "negative prior counts as zero")
}

func TestEstimatorZeroValueAndNil(t *testing.T) {
	var e deadline.Estimator
	assert.Zero(t, e.Estimate())
	e.Observe(3 * time.Second)
	assert.Equal(t, 3*time.Second, e.Estimate())

	var nilEst *deadline.Estimator
	assert.Zero(t, nilEst.Estimate())
	assert.Zero(t, nilEst.Mean())
	assert.Zero(t, nilEst.Quantile(0.5))
	assert.Zero(t, nilEst.Count())
}

func TestEstimatorEWMA(t *testing.T) {
	e := deadline.NewEstimator(time.Minute)
	e.Observe(10 * time.Second)
	e.Observe(20 * time.Second) // 10 + 0.2*(20-10)
	assert.Equal(t, 12*time.Second, e.Mean())
	e.Observe(2 * time.Second) // 12 + 0.2*(2-12)
	assert.Equal(t, 10*time.Second, e.Mean())
	e.Observe(-5 * time.Second) // counts as 0: 10 + 0.2*(0-10)
	assert.Equal(t, 8*time.Second, e.Mean())
}

// Fault (a fresh-eyes review): the mean is kept as a float64, where the
// largest Duration rounds up to 2^63; converted back it was the most
// negative Duration. An Estimator that observed only the largest Duration
// had a Mean of -292 years (its Estimate held, by the 90th percentile).
func TestEstimatorMeanOfTheLargestDurationIsTheLargest(t *testing.T) {
	e := deadline.NewEstimator(0)
	e.Observe(math.MaxInt64)
	assert.Equal(t, time.Duration(math.MaxInt64), e.Mean())
	e.Observe(math.MaxInt64 - 100)
	assert.Equal(t, time.Duration(math.MaxInt64), e.Mean(), "rounds to 2^63 too")
	assert.Equal(t, time.Duration(math.MaxInt64), e.Estimate())
	e.Observe(0) // a fifth of the way down: representable again
	assert.InDelta(t, 0.8*math.MaxInt64, float64(e.Mean()), 1e6)
}

func TestEstimatorQuantileOverLast64(t *testing.T) {
	e := deadline.NewEstimator(0)
	for i := 1; i <= 100; i++ { // the window keeps 37 s .. 100 s
		e.Observe(time.Duration(i) * time.Second)
	}
	assert.Equal(t, 100, e.Count())
	assert.Equal(t, 37*time.Second, e.Quantile(0))
	assert.Equal(t, 37*time.Second, e.Quantile(-1))
	assert.Equal(t, 100*time.Second, e.Quantile(1))
	assert.Equal(t, 100*time.Second, e.Quantile(2))
	assert.Equal(t, 68*time.Second, e.Quantile(0.5))   // rank 32
	assert.Equal(t, 94*time.Second, e.Quantile(0.9))   // rank ceil(57.6) = 58
	assert.Equal(t, 100*time.Second, e.Quantile(0.99)) // rank ceil(63.36) = 64
}

func TestEstimatorQuantileNearestRankIsExact(t *testing.T) {
	e := deadline.NewEstimator(0)
	for i := 1; i <= 50; i++ {
		e.Observe(time.Duration(i) * time.Second)
	}
	// 0.14*50 is 7.000000000000001 in float64; the 7th value is the answer.
	assert.Equal(t, 7*time.Second, e.Quantile(0.14))
	assert.Equal(t, 45*time.Second, e.Quantile(0.9))
}

func TestEstimatorEstimateIsMaxOfMeanAndP90(t *testing.T) {
	e := deadline.NewEstimator(0)
	for range 9 {
		e.Observe(time.Second)
	}
	e.Observe(100 * time.Second) // one slow pause
	// Mean: 1 + 0.2*99 = 20.8 s; p90 of ten values is the 9th: 1 s.
	assert.Equal(t, 20800*time.Millisecond, e.Mean())
	assert.Equal(t, time.Second, e.Quantile(0.9))
	assert.Equal(t, 20800*time.Millisecond, e.Estimate())
	for range 3 {
		e.Observe(time.Second)
	}
	// Mean decays to 1 + 19.8*0.8^3 = 11.1376 s; the slow pause is still
	// within the top 10% of 13 values (rank 12 of 13 is 1 s, rank 13 is 100 s).
	assert.Equal(t, time.Second, e.Quantile(0.9))
	for range 10 {
		e.Observe(50 * time.Second)
	}
	// Now p90 (rank ceil(0.9*23)=21 of 23) is 50 s, above the mean.
	assert.Equal(t, 50*time.Second, e.Quantile(0.9))
	assert.Greater(t, 50*time.Second, e.Mean())
	assert.Equal(t, 50*time.Second, e.Estimate())
}

func TestEstimatorConcurrentUse(t *testing.T) {
	e := deadline.NewEstimator(time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				e.Observe(time.Duration(i*1000+j) * time.Millisecond)
				if j%10 == 0 {
					_ = e.Estimate()
					_ = e.Quantile(0.5)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 8000, e.Count())
	assert.LessOrEqual(t, e.Quantile(1), 7999*time.Millisecond)
}

// Fault (a review of deadline): every other method of a nil *Estimator
// answered as an empty one, but Observe dereferenced it and panicked: a
// caller that had no estimator to feed (Work's nil each estimates zero)
// crashed in its measuring path, in the middle of a drain. Observe on nil
// now records nothing.
func TestNilEstimatorObservesNothing(t *testing.T) {
	var e *deadline.Estimator
	assert.NotPanics(t, func() { e.Observe(time.Second) })
	assert.Zero(t, e.Count())
	assert.Zero(t, e.Estimate())
}

// NewEstimator's doc comment gave no rule for a negative prior, which it
// silently took for zero (a review of deadline). The rule is now written:
// a negative prior is the zero prior, the zero value's, on every method and
// in a Work reserve, until the first observation replaces it.
func TestNegativePriorIsTheZeroPrior(t *testing.T) {
	neg, zero := deadline.NewEstimator(-time.Minute), deadline.NewEstimator(0)
	assert.Equal(t, zero.Estimate(), neg.Estimate())
	assert.Zero(t, neg.Estimate())
	assert.Zero(t, neg.Mean())
	assert.Zero(t, neg.Quantile(0.9))
	assert.Zero(t, deadline.Work(func() int { return 8 }, neg, nil)(), "no reserve before an observation")
	neg.Observe(time.Second)
	assert.Equal(t, time.Second, neg.Estimate(), "the first observation replaces it")
	assert.Equal(t, 8*time.Second, deadline.Work(func() int { return 8 }, neg, nil)())
}
