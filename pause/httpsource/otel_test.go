package httpsource

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestSpansAndMetricsPerRequest(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[{"id":"a","state":"running"},{"id":"b","state":"running"}]`))
	})
	mux.HandleFunc("POST /sandboxes/a/pause", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	mux.HandleFunc("POST /sandboxes/b/pause", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	src := inProcess(t, mux, WithTracerProvider(tp), WithMeterProvider(mp))

	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.NoError(t, sbs[0].Preserve(t.Context()))
	require.Error(t, sbs[1].Preserve(t.Context()))

	ended := spans.Ended()
	require.Len(t, ended, 3)
	assert.Equal(t, "httpsource.List", ended[0].Name())
	assert.Contains(t, ended[0].Attributes(), attribute.Int("sandboxes.running", 2))
	assert.Equal(t, "httpsource.Pause", ended[1].Name())
	assert.Contains(t, ended[1].Attributes(), attribute.String("sandbox.id", "a"))
	assert.Equal(t, codes.Unset, ended[1].Status().Code)
	assert.Contains(t, ended[2].Attributes(), attribute.String("sandbox.id", "b"))
	assert.Equal(t, codes.Error, ended[2].Status().Code)
	assert.Equal(t, scope, ended[0].InstrumentationScope().Name)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, scope, sm.Scope.Name)
		for _, m := range sm.Metrics {
			if m.Name != "drainkit.httpsource.requests" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				op, _ := dp.Attributes.Value("op")
				st, _ := dp.Attributes.Value("status")
				counts[op.AsString()+" "+st.AsString()] = dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"list 200": 1, "pause 204": 1, "pause 500": 1}, counts)
}
