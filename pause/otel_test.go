package pause_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

func TestTelemetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

		node := fakesandbox.NewNode()
		node.AddN("sb", 5, time.Second)
		node.Add(&fakesandbox.Sandbox{Name: "flaky", Faults: []fakesandbox.Fault{fakesandbox.Transient}},
			&fakesandbox.Sandbox{Name: "bad", Faults: []fakesandbox.Fault{fakesandbox.Permanent}})
		p, err := pause.New(node, pause.Config{TracerProvider: tp, MeterProvider: mp, BackOff: constant(time.Second)})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rep := p.Run(ctx, time.Time{})
		require.Equal(t, 6, rep.Counts[pause.Preserved])

		var run sdktrace.ReadOnlySpan
		per := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans.Ended() {
			assert.Equal(t, pause.ScopeName, s.InstrumentationScope().Name)
			switch s.Name() {
			case "pause.Run":
				run = s
			case "pause.Preserve":
				per[attr(s.Attributes(), "drainkit.pause.sandbox").AsString()] = s
			}
		}
		require.NotNil(t, run)
		assert.Equal(t, int64(6), attr(run.Attributes(), "drainkit.pause.preserved").AsInt64())
		assert.Equal(t, int64(1), attr(run.Attributes(), "drainkit.pause.failed").AsInt64())
		require.Len(t, per, 7)
		flaky := per["flaky"]
		assert.Equal(t, int64(2), attr(flaky.Attributes(), "drainkit.pause.attempts").AsInt64())
		assert.Equal(t, "preserved", attr(flaky.Attributes(), "drainkit.pause.outcome").AsString())
		assert.Equal(t, run.SpanContext().SpanID(), flaky.Parent().SpanID())
		assert.Equal(t, "failed", attr(per["bad"].Attributes(), "drainkit.pause.outcome").AsString())

		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		require.Len(t, rm.ScopeMetrics, 1)
		assert.Equal(t, pause.ScopeName, rm.ScopeMetrics[0].Scope.Name)
		got := map[string]metricdata.Metrics{}
		for _, m := range rm.ScopeMetrics[0].Metrics {
			got[m.Name] = m
		}
		units := map[string]string{}
		for name, m := range got {
			units[name] = m.Unit
		}
		assert.Equal(t, map[string]string{"drainkit.pause.preserve.duration": "s", "drainkit.pause.sandboxes": "{sandbox}",
			"drainkit.pause.preserve.active": "{sandbox}"}, units, "names under drainkit.pause, units beside them")
		for _, dp := range got[pause.MetricDuration].Data.(metricdata.Histogram[float64]).DataPoints {
			assert.Equal(t, 0.005, dp.Bounds[0], "sub-second preserves get buckets of their own")
			assert.Equal(t, 7200.0, dp.Bounds[len(dp.Bounds)-1], "and so do hour-long ones")
		}
		counts := map[string]int64{}
		for _, dp := range got[pause.MetricOutcomes].Data.(metricdata.Sum[int64]).DataPoints {
			v, _ := dp.Attributes.Value("drainkit.pause.outcome")
			counts[v.AsString()] = dp.Value
		}
		assert.Equal(t, map[string]int64{"preserved": 6, "failed": 1}, counts)
		var n uint64
		for _, dp := range got[pause.MetricDuration].Data.(metricdata.Histogram[float64]).DataPoints {
			n += dp.Count
		}
		assert.Equal(t, uint64(7), n)
		inflight := got[pause.MetricInFlight].Data.(metricdata.Sum[int64]).DataPoints
		require.Len(t, inflight, 1)
		assert.Equal(t, int64(0), inflight[0].Value, "in-flight back to zero")
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
}

func attr(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// The run span's drainkit.pause.limit is the limit the Run starts at, as
// the "run started" log line says: a second Run of an adaptive Preserver
// starts where the first one left the limit, not at the configured start.
//
//	Run 1: 256 x 20 ms, the limit climbs from 8 to 32
//	Run 2: its span and its log line say 32
func TestRunSpanCarriesTheLimitTheRunStartsAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		var buf bytes.Buffer
		node := fakesandbox.NewNode()
		node.AddN("first", 256, 20*time.Millisecond)
		p, err := pause.New(node, pause.Config{TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		runFor(t, p, time.Hour, 0)
		start := p.Limit()
		require.Greater(t, start, pause.DefaultLimit, "the first Run climbed")

		buf.Reset()
		node.AddN("second", 8, 20*time.Millisecond)
		runFor(t, p, time.Hour, 0)
		runs := 0
		for _, s := range spans.Ended() {
			if s.Name() == "pause.Run" {
				runs++
				if runs == 2 {
					assert.Equal(t, int64(start), attr(s.Attributes(), "drainkit.pause.limit").AsInt64())
				}
			}
		}
		require.Equal(t, 2, runs)
		assert.Contains(t, buf.String(), fmt.Sprintf(`msg="pause: run started" time_left=1h0m0s limit=%d `, start))
		require.NoError(t, tp.Shutdown(context.Background()))
	})
}

// outcomeCounts returns drainkit.pause.sandboxes and the number of
// drainkit.pause.preserve.duration samples, by outcome.
func outcomeCounts(t *testing.T, reader *sdkmetric.ManualReader) (counted, timed map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counted, timed = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case pause.MetricOutcomes:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					v, _ := dp.Attributes.Value("drainkit.pause.outcome")
					counted[v.AsString()] = dp.Value
				}
			case pause.MetricDuration:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					v, _ := dp.Attributes.Value("drainkit.pause.outcome")
					timed[v.AsString()] = int64(dp.Count)
				}
			}
		}
	}
	return counted, timed
}

// A Preserve abandoned past its SandboxTimeout that returns before the
// Report is counted in the metrics as the Report says it, preserved; one
// that returns after is counted timed_out, as the Report says it too.
// Counted as it was abandoned, the first stayed timed_out for good (a
// counter does not go down) beside a Report that said preserved.
//
//	limit 1, SandboxTimeout 5 s, then 10 x 1 s
//	"slow":  ignores its context, abandoned at 6 s, returns at 8 s (before the Report: preserved)
//	"stuck": ignores its context, abandoned at 12 s, returns at 10 min (after: timed_out)
//	before: preserved 10, timed_out 2; after: preserved 11, timed_out 1, as the Report
func TestAnAbandonedPreserveIsCountedAsTheReportSaysIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		node := fakesandbox.NewNode()
		start := time.Now()
		first := []pause.Sandbox{late{"slow", start.Add(8 * time.Second)}, late{"stuck", start.Add(10 * time.Minute)}}
		for _, sb := range node.AddN("sb", 10, time.Second) {
			first = append(first, sb)
		}
		listed := false
		p, err := pause.New(pause.ListFunc(func(ctx context.Context) ([]pause.Sandbox, error) {
			if listed {
				return node.List(ctx)
			}
			listed = true
			return first, nil
		}), pause.Config{Limit: 1, SandboxTimeout: 5 * time.Second, MeterProvider: mp})
		require.NoError(t, err)
		rep, _ := runFor(t, p, time.Minute, 0)
		require.Equal(t, map[pause.Outcome]int{pause.Preserved: 11, pause.TimedOut: 1}, rep.Counts)
		assert.Equal(t, pause.Preserved, entry(t, rep, "slow").Outcome)
		counted, timed := outcomeCounts(t, reader)
		assert.Equal(t, map[string]int64{"preserved": 11, "timed_out": 1}, counted, "drainkit.pause.sandboxes")
		assert.Equal(t, map[string]int64{"preserved": 11, "timed_out": 1}, timed, "drainkit.pause.preserve.duration")
		time.Sleep(10 * time.Minute) // "stuck" returns: counted once, as it was
		synctest.Wait()
		counted, _ = outcomeCounts(t, reader)
		assert.Equal(t, map[string]int64{"preserved": 11, "timed_out": 1}, counted)
		require.NoError(t, mp.Shutdown(context.Background()))
	})
}
