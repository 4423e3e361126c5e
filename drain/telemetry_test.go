package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/telemetry"
	"github.com/drainkit/drainkit/pause"
)

// spansOf returns the ended spans of the drain scope by name.
func spansOf(rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.InstrumentationScope().Name == scope {
			out[s.Name()] = s
		}
	}
	return out
}

func attrOf(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// One trace per termination: the root span from T0 (the preStop call) to
// the Report, and one child per phase, the preStop wait ("drain") first.
//
//	T0 (preStop) ......... 10 s (SIGTERM) .. gate .. preserve .. ublk .. Report
//	drain.shutdown [----------------------------------------------------]
//	drain.drain    [-------]
//	drain.gate               [--]  drain.preserve [--]  drain.ublk [--]
func TestEveryPhaseIsASpanUnderOneRootFromThePreStopCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		f := newFixture(t, fixtureOpts{grace: 3600 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Second,
			steps: []Step{step("ublk", time.Second, func(context.Context) error { return nil })},
			edit:  func(c *Config) { c.TracerProvider = tp }})
		t0 := time.Now()
		// The call answers after 5 s and the wait goes on: SIGTERM then finds
		// no call open, so it is not a hook the kubelet gave up on.
		call := f.callPreStop(t.Context(), "?wait=5s")
		time.Sleep(10 * time.Second) // the sandboxes keep running; SIGTERM comes
		rep := f.d.Shutdown(context.Background())
		<-call.done
		require.NoError(t, rep.Err())

		spans := spansOf(rec)
		require.Len(t, spans, 5, "%v", spans)
		root := spans["drain.shutdown"]
		require.NotNil(t, root)
		assert.False(t, root.Parent().IsValid(), "the termination's span is a root")
		assert.Equal(t, t0, root.StartTime(), "it starts at T0")
		assert.False(t, root.EndTime().Before(rep.End), "it ends with the Report")
		assert.Equal(t, codes.Unset, root.Status().Code, "nothing lost, nothing failed")
		assert.Equal(t, int64(0), attrOf(root.Attributes(), "drainkit.drain.lost").AsInt64())
		assert.InDelta(t, rep.Headroom.Seconds(), attrOf(root.Attributes(), "drainkit.drain.headroom").AsFloat64(), 1e-9)

		for _, name := range []string{PhaseDrain, PhaseGate, PhasePreserve, "ublk"} {
			s := spans["drain."+name]
			require.NotNil(t, s, name)
			assert.Equal(t, root.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of the root", name)
			assert.Equal(t, root.SpanContext().TraceID(), s.SpanContext().TraceID())
			assert.Equal(t, name, attrOf(s.Attributes(), "drainkit.drain.phase").AsString())
			assert.Equal(t, string(rep.Phase(name).Result), attrOf(s.Attributes(), "drainkit.drain.result").AsString(), name)
		}
		wait := spans["drain.drain"]
		assert.Equal(t, t0, wait.StartTime())
		assert.Equal(t, 10*time.Second, wait.EndTime().Sub(wait.StartTime()), "the wait lasted until SIGTERM")
		assert.Equal(t, reasonSIGTERM, attrOf(wait.Attributes(), "drainkit.drain.reason").AsString())
		assert.Equal(t, codes.Unset, wait.Status().Code, "a wait that SIGTERM ended did not fail")
		require.NoError(t, tp.Shutdown(context.Background()))
	})
}

// Without a preStop call the root starts at SIGTERM, and there is no drain
// span.
func TestWithoutPreStopTheRootStartsAtShutdown(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Millisecond,
		steps: []Step{step("ublk", time.Second, func(context.Context) error { return nil })},
		edit:  func(c *Config) { c.TracerProvider = tp }})
	f.d.Shutdown(context.Background())
	var names []string
	for name := range spansOf(rec) {
		names = append(names, name)
	}
	assert.ElementsMatch(t, []string{"drain.gate", "drain.preserve", "drain.ublk", "drain.shutdown"}, names)
}

// The seed's complaint: the root span stayed Unset with sandboxes lost.
func TestRootSpanIsAnErrorWhenASandboxIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		f := newFixture(t, fixtureOpts{grace: 60 * time.Second, margin: 5 * time.Second, sandboxes: 2, latency: time.Second,
			edit: func(c *Config) { c.TracerProvider = tp }})
		f.node.Add(&fakesandbox.Sandbox{Name: "broken", Latency: time.Second, Faults: []fakesandbox.Fault{fakesandbox.Permanent}})
		rep := f.d.Shutdown(context.Background())
		require.Equal(t, 1, rep.Lost())

		spans := spansOf(rec)
		root := spans["drain.shutdown"]
		require.NotNil(t, root)
		assert.Equal(t, codes.Error, root.Status().Code)
		assert.Contains(t, root.Status().Description, "1 sandbox(es) not preserved")
		assert.Equal(t, int64(1), attrOf(root.Attributes(), "drainkit.drain.lost").AsInt64())
		assert.Equal(t, codes.Error, spans["drain.preserve"].Status().Code)
		assert.Equal(t, codes.Unset, spans["drain.gate"].Status().Code)
	})
}

// collect returns the drain scope's metrics by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == scope {
			for _, m := range sm.Metrics {
				out[m.Name] = m
			}
		}
	}
	return out
}

// Every metric is drainkit.drain.<name> with its unit beside it, phases
// fall in buckets that run from milliseconds to hours, the running gauge
// follows the preStop wait's counts, and the gate counts its rejections
// by class.
func TestMetricsNamesUnitsBucketsGaugeAndRejections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		f := newFixture(t, fixtureOpts{grace: 7200 * time.Second, margin: 5 * time.Second, sandboxes: 3, latency: time.Second,
			edit: func(c *Config) {
				c.MeterProvider = mp
				c.Gate = &Gate{Exempt: []Class{Pause}}
			}})
		// The call answers after 30 min and the wait goes on: SIGTERM then
		// finds no call open, so it is not a hook the kubelet gave up on.
		call := f.callPreStop(t.Context(), "?wait=30m")
		synctest.Wait()
		running := func() int64 {
			g := collect(t, reader)[metricRunning].Data.(metricdata.Gauge[int64])
			require.Len(t, g.DataPoints, 1)
			return g.DataPoints[0].Value
		}
		assert.Equal(t, int64(3), running(), "the first count of the wait")
		f.node.Remove("sb-0")
		time.Sleep(defaultPollInterval)
		synctest.Wait()
		assert.Equal(t, int64(2), running(), "the next count")

		// Rejections: through the HTTP middleware and Enter, by class.
		h := f.d.Gate().Admit(Create, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		for range 2 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/sandboxes", nil))
			require.Equal(t, http.StatusServiceUnavailable, w.Code)
		}
		_, err := f.d.Gate().Enter(Resume)
		require.ErrorIs(t, err, ErrDraining)
		leave, err := f.d.Gate().Enter(Pause)
		require.NoError(t, err, "exempt")
		leave()

		time.Sleep(time.Hour) // a long wait: the phase lands in an hour's bucket
		rep := f.d.Shutdown(context.Background())
		<-call.done
		require.NoError(t, rep.Err())

		got := collect(t, reader)
		var names []string
		for name, m := range got {
			names = append(names, name)
			assert.True(t, strings.HasPrefix(name, "drainkit.drain."), name)
			assert.NotRegexp(t, `_(s|ms|ns|seconds)$`, name, "the unit belongs in Unit")
			assert.NotEmpty(t, m.Unit, name)
			assert.NotEmpty(t, m.Description, name)
		}
		assert.ElementsMatch(t, []string{"drainkit.drain.phase.duration", "drainkit.drain.headroom",
			"drainkit.drain.sandboxes.running", "drainkit.drain.gate.rejections", "drainkit.drain.outcomes"}, names)

		hist := got["drainkit.drain.phase.duration"]
		assert.Equal(t, "s", hist.Unit)
		byPhase := map[string]metricdata.HistogramDataPoint[float64]{}
		for _, dp := range hist.Data.(metricdata.Histogram[float64]).DataPoints {
			assert.Equal(t, telemetry.DurationBuckets, dp.Bounds)
			ph, _ := dp.Attributes.Value("drainkit.drain.phase")
			byPhase[ph.AsString()] = dp
		}
		require.Contains(t, byPhase, PhaseDrain)
		require.Contains(t, byPhase, PhaseGate)
		require.Contains(t, byPhase, PhasePreserve)
		wait := byPhase[PhaseDrain]
		assert.InDelta(t, 3601, wait.Sum, 1e-6, "the wait: 1 s poll + an hour")
		i := bucketOf(wait)
		assert.Equal(t, 3600.0, telemetry.DurationBuckets[i-1], "an hour-long wait is in (3600, 7200]")
		pres := byPhase[PhasePreserve]
		assert.Equal(t, 2.5, telemetry.DurationBuckets[bucketOf(pres)], "two one-second preserves in a row are in (1, 2.5]")

		margin := got["drainkit.drain.headroom"]
		assert.Equal(t, "s", margin.Unit)
		assert.InDelta(t, rep.Headroom.Seconds(), margin.Data.(metricdata.Gauge[float64]).DataPoints[0].Value, 1e-9)

		assert.Equal(t, "{sandbox}", got[metricRunning].Unit)
		rej := got["drainkit.drain.gate.rejections"]
		assert.Equal(t, "{operation}", rej.Unit)
		byClass := map[string]int64{}
		for _, dp := range rej.Data.(metricdata.Sum[int64]).DataPoints {
			c, _ := dp.Attributes.Value("drainkit.drain.class")
			byClass[c.AsString()] = dp.Value
		}
		assert.Equal(t, map[string]int64{"create": 2, "resume": 1}, byClass, "exempt operations are not rejections")
	})
}

// bucketOf returns the index of the one bucket holding dp's values.
func bucketOf(dp metricdata.HistogramDataPoint[float64]) int {
	for i, n := range dp.BucketCounts {
		if n > 0 {
			return i
		}
	}
	return -1
}

// outcomesCounted returns the counter name by its attribute key.
func outcomesCounted(t *testing.T, r *sdkmetric.ManualReader, name, key string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				o, _ := dp.Attributes.Value(attribute.Key(key))
				out[o.AsString()] += dp.Value
			}
		}
	}
	return out
}

// Fault: the only metric of what became of the sandboxes,
// drainkit.pause.sandboxes, counts per Run of the Preserver, and a preserve
// phase that runs it again within one drain (a restarted kubelet moved
// SIGKILL later, row 239) counted the 14 sandboxes the first Run left
// not started as not_started, and again as preserved when the second Run
// preserved them: a drain whose Report says 50 of 50 preserved showed 14
// lost to an alert on not_started. drainkit.drain.outcomes counts the
// drain's final account, the Report's, each sandbox once.
//
//	0 s    the hook (grace 20 s): 50 preserves of 1 s, two at a time, do not fit
//	10 s   the kubelet restarts: SIGKILL at 30 s, the phase preserves again
func TestDrainOutcomesMetricIsTheReportsFinalAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t0 := time.Now()
		api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-0"}
		api.Delete(t0, 20*time.Second)
		pod := podOver(t, api, handlerTransport{api})
		var ran []string
		f := newFixture(t, fixtureOpts{grace: 20 * time.Second, sandboxes: 50, latency: time.Second, limit: 2,
			steps: []Step{recordStep("ublk", 500*time.Millisecond, &ran)},
			edit:  func(c *Config) { c.Pod, c.MeterProvider = pod, mp }})
		startQuery := func(at time.Time) string {
			return "?start=" + url.QueryEscape(at.Format(time.RFC3339Nano))
		}
		f.callPreStop(t.Context(), startQuery(t0)).wait(t)
		restarted := make(chan struct{})
		go func() {
			defer close(restarted)
			time.Sleep(10 * time.Second)
			f.callPreStop(context.Background(), startQuery(time.Now())+"&wait=0s").wait(t)
		}()
		rep := f.d.Shutdown(context.Background())
		<-restarted
		require.NoError(t, rep.Err())
		require.Equal(t, 50, rep.Preserve.Counts[pause.Preserved])

		perRun := outcomesCounted(t, reader, "drainkit.pause.sandboxes", "drainkit.pause.outcome")
		require.Positive(t, perRun[string(pause.NotStarted)], "the scenario: the first Run left some not started (%v)", perRun)
		assert.Equal(t, map[string]int64{"preserved": 50},
			outcomesCounted(t, reader, metricOutcomes, attrOutcome), "the drain's metric is the Report's account")
	})
}
