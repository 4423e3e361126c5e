package telemetry_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/drainkit/drainkit/internal/telemetry"
)

// A package records a duration on a histogram made with Duration: seconds,
// on drainkit's boundaries, so that a 40 ms gate and a 45 s preserve phase
// land in buckets of their own.
func ExampleDuration() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	h, err := mp.Meter("github.com/drainkit/drainkit/drain").Float64Histogram(
		"drainkit.drain.phase.duration", telemetry.Duration("How long a drain phase took.")...)
	if err != nil {
		panic(err)
	}
	h.Record(context.Background(), 0.04)
	h.Record(context.Background(), 45)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	m := rm.ScopeMetrics[0].Metrics[0]
	p := m.Data.(metricdata.Histogram[float64]).DataPoints[0]
	fmt.Println(m.Name, m.Unit, p.Count)
	for i, n := range p.BucketCounts {
		if n > 0 {
			fmt.Printf("%d in (%v, %v]\n", n, p.Bounds[i-1], p.Bounds[i])
		}
	}
	// Output:
	// drainkit.drain.phase.duration s 2
	// 1 in (0.025, 0.05]
	// 1 in (30, 60]
}
