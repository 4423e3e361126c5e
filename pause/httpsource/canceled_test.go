package httpsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Fault: a request its caller cancelled before any answer (the
// supervisor's readiness listing, cut when the kubelet's probe closed its
// connection, with the cause "the readiness probe gave up"; a drain's
// Force) was recorded in drainkit.httpsource.request.duration with
// error.type "_OTHER", the class of a connection refused or reset: a
// dashboard of the server's failures by error.type counted every probe
// that gave up as a failure of the server's. The OpenTelemetry HTTP
// conventions make error.type the error's low-cardinality class, and a
// cancelled request is one of its own. Over loopback, a server whose
// listing answers after 2 s:
//
//	0 s     a listing is sent, its context cancelled with a cause at 50 ms
//	        before: error.type "_OTHER"; now: "canceled"
//	        another cancelled without one: the same
//	        another whose deadline ends it at 50 ms: "timeout", as before
func TestACancelledRequestRecordsItsOwnErrorType(t *testing.T) {
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality // each collect gives the requests since the last
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	src, err := New(srv.URL, Config{MeterProvider: mp})
	require.NoError(t, err)

	probeGaveUp := errors.New("the readiness probe gave up: its connection closed before the server's listing answered")
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(50*time.Millisecond, func() { cancel(probeGaveUp) })
	_, err = src.RunningIDs(ctx)
	require.ErrorIs(t, err, probeGaveUp)
	assert.Equal(t, []string{"canceled"}, errorTypes(t, reader), "a listing its probe gave up on")

	ctx, stop := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, stop)
	_, err = src.RunningIDs(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"canceled"}, errorTypes(t, reader), "a listing cancelled with no cause")

	ctx, stop = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	_, err = src.RunningIDs(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []string{"timeout"}, errorTypes(t, reader), "a listing its deadline ended")
}

// errorTypes returns the error.type of every request reader recorded
// since it was last collected (a delta reader's).
func errorTypes(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	var types []string
	for _, dp := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		if dp.Count == 0 {
			continue
		}
		et, _ := dp.Attributes.Value("error.type")
		types = append(types, et.AsString())
	}
	return types
}

// Fault: the same cut after the status came, in the body (a page of a
// large listing that the readiness probe gave up on while it was being
// read), was recorded as a request that went well: its 200 and no
// error.type, where the request failed (the HTTP conventions set
// error.type for an error after a 1xx-3xx status: the body not received).
// It now has the class of what cut it beside its status. Over loopback, a
// listing whose server sends its status and the start of its body, then
// nothing:
//
//	before: 200, no error.type
//	now:    200 and error.type "canceled" (its context cancelled at
//	        50 ms), or "timeout" (its deadline at 50 ms)
func TestARequestCutInItsBodyRecordsItsErrorType(t *testing.T) {
	reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[{"id":"a","state":"running"},`))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	src, err := New(srv.URL, Config{MeterProvider: mp})
	require.NoError(t, err)

	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(50*time.Millisecond, func() { cancel(errors.New("the readiness probe gave up")) })
	_, err = src.RunningIDs(ctx)
	require.ErrorContains(t, err, "reading body")
	assert.Equal(t, []string{"200 canceled"}, statusAndErrorTypes(t, reader), "a listing its probe gave up on as it read the body")

	ctx, stop := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer stop()
	_, err = src.RunningIDs(ctx)
	require.ErrorContains(t, err, "reading body")
	assert.Equal(t, []string{"200 timeout"}, statusAndErrorTypes(t, reader), "a listing its deadline cut as it read the body")
}

// statusAndErrorTypes returns the status code and error.type, "CODE TYPE",
// of every request reader recorded since it was last collected (a delta
// reader's).
func statusAndErrorTypes(t *testing.T, reader *sdkmetric.ManualReader) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	var got []string
	for _, dp := range rm.ScopeMetrics[0].Metrics[0].Data.(metricdata.Histogram[float64]).DataPoints {
		if dp.Count == 0 {
			continue
		}
		code, _ := dp.Attributes.Value("http.response.status_code")
		et, _ := dp.Attributes.Value("error.type")
		got = append(got, fmt.Sprint(code.AsInt64(), " ", et.AsString()))
	}
	return got
}
