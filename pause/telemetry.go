package pause

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	otelx "github.com/drainkit/drainkit/internal/telemetry"
)

// ScopeName is the OpenTelemetry instrumentation scope of this package.
const ScopeName = "github.com/drainkit/drainkit/pause"

// The metric names this package records, under its scope, in the
// OpenTelemetry semantic-convention style: drainkit.pause.<name>, the unit
// in the instrument, never in the name. The package documentation lists
// them for users.
const (
	// metricDuration is a histogram (s) of the time from a sandbox's first
	// Preserve attempt to its outcome, by drainkit.pause.outcome, for the
	// sandboxes that started; its boundaries run from 5 ms to 2 h.
	metricDuration = "drainkit.pause.preserve.duration"
	// metricOutcomes is a counter ({sandbox}) of the sandboxes accounted
	// for, one per sandbox, by drainkit.pause.outcome.
	metricOutcomes = "drainkit.pause.sandboxes"
	// metricInFlight is an up-down counter ({sandbox}) of the preserves
	// running now.
	metricInFlight = "drainkit.pause.preserve.active"
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
	t.duration, err1 = m.Float64Histogram(metricDuration,
		otelx.Duration("Time from a sandbox's first Preserve attempt to its outcome.")...)
	t.count, err2 = m.Int64Counter(metricOutcomes, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Sandboxes accounted for by outcome."))
	t.inflight, err3 = m.Int64UpDownCounter(metricInFlight, metric.WithUnit("{sandbox}"),
		metric.WithDescription("Preserves running now."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, errors.Join(errors.New("pause: meter provider: creating instruments failed"), err)
	}
	for i, o := range outcomes {
		opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("drainkit.pause.outcome", string(o))))
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

// outcome records a settled sandbox, whose entry e is written (Entry.end):
// its Duration is the time from its first attempt to its outcome, res.
func (tel *telemetry) outcome(ctx context.Context, e *Entry, res *result) {
	i := outcomeIndex(res.outcome)
	tel.count.Add(ctx, 1, tel.add[i]...)
	if res.outcome != NotStarted {
		tel.duration.Record(ctx, e.Duration.Seconds(), tel.record[i]...)
	}
}
