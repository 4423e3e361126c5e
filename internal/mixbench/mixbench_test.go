package mixbench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	assert.Equal(t, 2*(1+2)+1, resets, "before every Run and once at the end")
	assert.Equal(t, 2, c.Rounds)
	assert.Equal(t, int64(3*mib), c.Adaptive.Bytes)
	assert.Contains(t, []int{1, 2}, c.Best().Limit)
}
