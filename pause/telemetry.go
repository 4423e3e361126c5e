package pause

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/pause"

// The metric names this package records.
const (
	MetricDuration = "pause.preserve.duration" // histogram, seconds, by outcome, for started sandboxes
	MetricOutcomes = "pause.preserve.outcomes" // counter, by outcome, one per sandbox
	MetricInFlight = "pause.preserve.inflight" // up-down counter: preserves running now
)

var outcomes = [...]Outcome{Preserved, Failed, TimedOut, NotStarted, Vanished}

// telemetry holds the instruments and, per outcome, the measurement options
// built once so that recording allocates nothing.
type telemetry struct {
	tracer   trace.Tracer
	duration metric.Float64Histogram
	count    metric.Int64Counter
	inflight metric.Int64UpDownCounter
	record   [len(outcomes)][]metric.RecordOption
	add      [len(outcomes)][]metric.AddOption
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (*telemetry, error) {
	t := &telemetry{tracer: tp.Tracer(ScopeName)}
	m := mp.Meter(ScopeName)
	var err1, err2, err3 error
	t.duration, err1 = m.Float64Histogram(MetricDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a sandbox's first Preserve attempt to its outcome."),
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600))
	t.count, err2 = m.Int64Counter(MetricOutcomes, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Sandboxes accounted for by outcome."))
	t.inflight, err3 = m.Int64UpDownCounter(MetricInFlight, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Preserves running now."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, errors.Join(errors.New("pause: meter provider: creating instruments failed"), err)
	}
	for i, o := range outcomes {
		opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("pause.outcome", string(o))))
		t.record[i] = []metric.RecordOption{opt}
		t.add[i] = []metric.AddOption{opt}
	}
	return t, nil
}

func outcomeIndex(o Outcome) int {
	for i, x := range outcomes {
		if x == o {
			return i
		}
	}
	return 0
}

// outcome records a settled sandbox.
func (tel *telemetry) outcome(ctx context.Context, t *task, res *result) {
	i := outcomeIndex(res.outcome)
	tel.count.Add(ctx, 1, tel.add[i]...)
	if res.outcome != NotStarted {
		tel.duration.Record(ctx, res.end.Sub(t.e.Start).Seconds(), tel.record[i]...)
	}
}
