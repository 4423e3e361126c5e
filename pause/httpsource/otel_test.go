package httpsource

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

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
	src := inProcess(t, mux, Config{TracerProvider: tp, MeterProvider: mp})

	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.NoError(t, sbs[0].Preserve(t.Context()))
	require.Error(t, sbs[1].Preserve(t.Context()))

	ended := spans.Ended()
	require.Len(t, ended, 3)
	assert.Equal(t, "httpsource.List", ended[0].Name())
	assert.Contains(t, ended[0].Attributes(), attribute.Int("drainkit.httpsource.sandboxes", 2))
	assert.Equal(t, "httpsource.Pause", ended[1].Name())
	assert.Contains(t, ended[1].Attributes(), attribute.String("drainkit.pause.sandbox", "a"))
	assert.Equal(t, codes.Unset, ended[1].Status().Code)
	assert.Contains(t, ended[2].Attributes(), attribute.String("drainkit.pause.sandbox", "b"))
	assert.Equal(t, codes.Error, ended[2].Status().Code)
	assert.Equal(t, scope, ended[0].InstrumentationScope().Name)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.Equal(t, scope, rm.ScopeMetrics[0].Scope.Name)
	require.Len(t, rm.ScopeMetrics[0].Metrics, 1)
	m := rm.ScopeMetrics[0].Metrics[0]
	assert.Equal(t, "drainkit.httpsource.request.duration", m.Name)
	assert.Equal(t, "s", m.Unit)
	counts := map[string]uint64{}
	for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		assert.Equal(t, 0.005, dp.Bounds[0])
		op, _ := dp.Attributes.Value("drainkit.httpsource.operation")
		method, _ := dp.Attributes.Value("http.request.method")
		code, _ := dp.Attributes.Value("http.response.status_code")
		counts[fmt.Sprint(op.AsString(), " ", method.AsString(), " ", code.AsInt64())] = dp.Count
	}
	assert.Equal(t, map[string]uint64{"list GET 200": 1, "pause POST 204": 1, "pause POST 500": 1}, counts)
}

// A request that gets no answer is recorded with error.type instead of a
// status code.
func TestRequestWithoutAnAnswerRecordsErrorType(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens: connection refused
	src, err := New("http://"+addr, Config{MeterProvider: mp, ListTimeout: time.Second})
	require.NoError(t, err)
	_, err = src.List(t.Context())
	require.Error(t, err)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	dps := rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints
	require.NotEmpty(t, dps)
	for _, dp := range dps {
		et, ok := dp.Attributes.Value("error.type")
		assert.True(t, ok)
		assert.Equal(t, "_OTHER", et.AsString())
		_, ok = dp.Attributes.Value("http.response.status_code")
		assert.False(t, ok)
	}
}

// Fault: an answer with an error status (a 500 to a pause, a 403 to a
// listing) was recorded with http.response.status_code alone, where the
// OpenTelemetry HTTP client conventions set error.type to the status code
// as well: a failure rate counted by error.type, as the conventions'
// dashboards do, missed every refused pause. A 2xx has no error.type.
func TestErrorStatusRecordsErrorTypeBesideTheStatusCode(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[{"id":"a","state":"running"},{"id":"b","state":"running"}]`))
	})
	mux.HandleFunc("POST /sandboxes/a/pause", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	mux.HandleFunc("POST /sandboxes/b/pause", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	src := inProcess(t, mux, Config{MeterProvider: mp})
	sbs, err := src.List(t.Context())
	require.NoError(t, err)
	require.NoError(t, sbs[0].Preserve(t.Context()))
	require.Error(t, sbs[1].Preserve(t.Context()))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	errType := map[int64]string{}
	for _, dp := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		code, _ := dp.Attributes.Value("http.response.status_code")
		et, _ := dp.Attributes.Value("error.type")
		errType[code.AsInt64()] = et.AsString()
	}
	assert.Equal(t, map[int64]string{200: "", 204: "", 500: "500"}, errType)
}
