package mixbench_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/mixbench"
	"github.com/drainkit/drainkit/pause"
)

const mib = 1 << 20

func entry(start, end time.Duration, size int64) pause.Entry {
	t0 := time.Unix(0, 0)
	return pause.Entry{Start: t0.Add(start), End: t0.Add(end), Duration: end - start, Size: size}
}

// Two 1 MiB preserves side by side in 1 s moved 2 MiB/s; one after the
// other, 1 MiB/s; a third one alone afterwards does not dilute the first
// two's concurrency.
func TestThroughputByLittlesLaw(t *testing.T) {
	assert.InDelta(t, 2*mib, mixbench.Throughput([]pause.Entry{
		entry(0, time.Second, mib), entry(0, time.Second, mib),
	}), 1)
	assert.InDelta(t, mib, mixbench.Throughput([]pause.Entry{
		entry(0, time.Second, mib), entry(time.Second, 2*time.Second, mib),
	}), 1)
	// (2x1 + 2x1 + 1x2) MiB / 4 s
	assert.InDelta(t, 1.5*mib, mixbench.Throughput([]pause.Entry{
		entry(0, time.Second, mib), entry(0, time.Second, mib), entry(time.Second, 3*time.Second, 2*mib),
	}), 1)
	assert.Zero(t, mixbench.Throughput(nil))
}

type sized struct {
	id   string
	size int64
}

func (s sized) ID() string                       { return s.id }
func (s sized) Size() int64                      { return s.size }
func (sized) Preserve(ctx context.Context) error { return nil }

// Compare runs the adaptive default and every limit of the sweep, and the
// best of them is one of the sweep's.
func TestCompareRunsEveryLimit(t *testing.T) {
	mk := func() ([]pause.Sandbox, error) {
		return []pause.Sandbox{sized{"a", mib}, sized{"b", 2 * mib}}, nil
	}
	resets := 0
	c, err := mixbench.Compare(context.Background(), 2, 0, mk, func() error { resets++; return nil }, []int{1, 2}, pause.Config{})
	require.NoError(t, err)
	assert.Equal(t, 2*(2+2)+1, resets, "before every Run and once at the end")
	assert.Equal(t, 2, c.Rounds)
	assert.Equal(t, int64(3*mib), c.Adaptive.Bytes)
	assert.Equal(t, int64(3*mib), c.Learned.Bytes)
	assert.Contains(t, []int{1, 2}, c.Best().Limit)
}

// A later drain on the same node starts from what the drain before it
// learned: its limit, under the default ceiling, and an Estimator from its
// estimate; a Run that learned nothing gives the configuration as it was.
func TestFromLearnedIsWhatAServerStartsFrom(t *testing.T) {
	cfg := pause.Config{Estimator: deadline.NewEstimator(time.Second)}
	same := mixbench.FromLearned(cfg, mixbench.Result{Estimate: 20 * time.Millisecond})
	assert.Equal(t, cfg, same)

	next := mixbench.FromLearned(cfg, mixbench.Result{Learned: 16, Estimate: 20 * time.Millisecond})
	assert.Equal(t, 16, next.Limit)
	assert.Equal(t, mixbench.MaxLimit, next.MaxLimit)
	assert.Equal(t, 20*time.Millisecond, next.Estimator.Estimate())
	assert.Equal(t, time.Second, cfg.Estimator.Estimate(), "the cold Run's Estimator is not the next one's")
}

// A Run that compares limits says what it learned: 256 waits of 20 ms
// climb 8, 16, 32, and learn 32.
func TestRunReportsWhatItLearned(t *testing.T) {
	sbs := make([]pause.Sandbox, 256)
	for i := range sbs {
		sbs[i] = waiter{fmt.Sprint("w", i)}
	}
	synctest.Test(t, func(t *testing.T) {
		res, err := mixbench.Run(context.Background(), sbs, pause.Config{Estimator: deadline.NewEstimator(time.Second)})
		require.NoError(t, err)
		assert.Equal(t, 32, res.Learned)
		assert.Equal(t, 20*time.Millisecond, res.Estimate)
	})
}

// waiter preserves in 20 ms, and never shares anything with another.
type waiter struct{ id string }

func (w waiter) ID() string { return w.id }
func (waiter) Preserve(ctx context.Context) error {
	time.Sleep(20 * time.Millisecond)
	return nil
}
