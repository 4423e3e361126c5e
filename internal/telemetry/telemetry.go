package telemetry

import "go.opentelemetry.io/otel/metric"

// DurationBuckets are the histogram boundaries, in seconds, of every
// duration drainkit records: a preserve, a phase, a device teardown, an
// HTTP call. Phases last from milliseconds (a gate with nothing in flight)
// to hours (the preStop wait of a node with a long grace period), so the
// boundaries run from 5 ms to 2 h, roughly doubling, where the SDK's
// default ones put everything under 5 s in one bucket and stop at 10 s.
var DurationBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
	120, 300, 600, 1200, 1800, 3600, 7200,
}

// Duration returns the options of a duration histogram: unit "s", the
// description, and DurationBuckets.
func Duration(description string) []metric.Float64HistogramOption {
	return []metric.Float64HistogramOption{
		metric.WithUnit("s"),
		metric.WithDescription(description),
		metric.WithExplicitBucketBoundaries(DurationBuckets...),
	}
}
