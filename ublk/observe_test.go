package ublk

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/drainkit/drainkit/internal/telemetry"
)

func TestRunReportsThroughSpanMetricsAndLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 0)
		d := newMemDaemon(f.tree, 0)
		d.hung = true
		defer d.close()
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var logs bytes.Buffer
		td, err := New(d, f.config(vulnerable, nil, Config{NoControl: true, TracerProvider: tp, MeterProvider: mp, Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
		require.NoError(t, err)
		_, _, err = runFor(t, td, 10*time.Second)
		require.Error(t, err)

		ended := spans.Ended()
		require.Len(t, ended, 1)
		sp := ended[0]
		assert.Equal(t, "ublk.Teardown", sp.Name())
		assert.Equal(t, ScopeName, sp.InstrumentationScope().Name)
		attrs := map[string]string{}
		for _, kv := range sp.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		assert.Equal(t, "left_live", attrs["drainkit.ublk.verdict"], "the verdict is an identifier")
		assert.Equal(t, "vulnerable", attrs["drainkit.ublk.kernel.class"])
		var events []string
		for _, e := range sp.Events() {
			events = append(events, e.Name)
			if e.Name == "request stop" {
				keys := map[string]bool{}
				for _, kv := range e.Attributes {
					keys[string(kv.Key)] = true
				}
				assert.True(t, keys["drainkit.ublk.step.result"] && keys["drainkit.ublk.step.duration"], "%v", keys)
			}
		}
		assert.Contains(t, events, "request stop")
		assert.Equal(t, "Error", sp.Status().Code.String())

		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		units := map[string]string{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				units[m.Name] = m.Unit
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						v, _ := dp.Attributes.Value("drainkit.ublk.verdict")
						assert.Equal(t, "left_live", v.AsString())
					}
				case metricdata.Histogram[float64]:
					for _, dp := range d.DataPoints {
						assert.Equal(t, telemetry.DurationBuckets, dp.Bounds)
						assert.InDelta(t, 10, dp.Sum, 1e-9, "the step ran to its 10 s deadline")
					}
				}
			}
		}
		assert.Equal(t, map[string]string{"drainkit.ublk.devices": "{device}", "drainkit.ublk.teardown.duration": "s"}, units)

		assert.Contains(t, logs.String(), "ublk teardown incomplete")
		assert.Contains(t, logs.String(), "unsafe to kill")
		require.NoError(t, tp.Shutdown(context.Background()))
		require.NoError(t, mp.Shutdown(context.Background()))
	})
}
