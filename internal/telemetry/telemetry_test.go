package telemetry

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A sub-second phase and an hour-long one land in different buckets, and
// neither lands in the overflow bucket.
func TestDurationBucketsSeparateSubSecondFromHourLongPhases(t *testing.T) {
	require.True(t, slices.IsSorted(DurationBuckets))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h, err := mp.Meter("t").Float64Histogram("drainkit.test.duration", Duration("test")...)
	require.NoError(t, err)
	for _, s := range []float64{0.02, 0.3, 4, 45, 1500, 3599} {
		h.Record(context.Background(), s)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	m := rm.ScopeMetrics[0].Metrics[0]
	assert.Equal(t, "s", m.Unit)
	dp := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
	assert.Equal(t, DurationBuckets, dp.Bounds)
	used := 0
	for _, n := range dp.BucketCounts {
		assert.LessOrEqual(t, n, uint64(1), "two of the durations share a bucket")
		used += int(n)
	}
	assert.Equal(t, 6, used)
	assert.Zero(t, dp.BucketCounts[len(dp.BucketCounts)-1], "an hour-long phase overflowed the last bucket")
}
