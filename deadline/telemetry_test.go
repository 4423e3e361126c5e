package deadline_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
)

func TestBudgetLogsEveryChangeThatTakesEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		b, err := deadline.New(3600*time.Second, deadline.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
		require.NoError(t, err)
		t0 := time.Now()
		b.OnPreStop(t0)
		b.OnPreStop(t0.Add(time.Second))      // ignored: not logged
		b.Tighten(t0.Add(4000 * time.Second)) // later: not logged
		b.Tighten(t0.Add(30 * time.Second))   // logged
		b.OnSIGTERM(t0.Add(30 * time.Second)) // logged: the hook overran the cut grace
		b.OnSIGTERM(t0.Add(31 * time.Second)) // ignored

		type record struct {
			Msg, Event, Anchor string
			T0, Kill, Deadline time.Time
			SIGTERM            *time.Time
		}
		var got []record
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var r record
			require.NoError(t, dec.Decode(&r))
			got = append(got, r)
		}
		require.Len(t, got, 3)
		assert.Equal(t, []string{"preStop", "tighten", "SIGTERM"}, []string{got[0].Event, got[1].Event, got[2].Event})
		assert.Equal(t, "deadline: budget changed", got[0].Msg)
		assert.Equal(t, "preStop", got[2].Anchor)
		assert.True(t, t0.Equal(got[0].T0))
		assert.True(t, t0.Add(3600*time.Second).Equal(got[0].Kill))
		assert.True(t, t0.Add(30*time.Second).Equal(got[1].Kill))
		assert.True(t, t0.Add(32*time.Second).Equal(got[2].Kill))
		assert.True(t, t0.Add(31*time.Second).Equal(got[2].Deadline))
		assert.Nil(t, got[1].SIGTERM)
		require.NotNil(t, got[2].SIGTERM)
		assert.True(t, t0.Add(30*time.Second).Equal(*got[2].SIGTERM))
	})
}

func TestPodReaderTracesEachRead(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(t.Context())) }()

	kill := time.Date(2026, 11, 30, 3, 30, 0, 0, time.UTC)
	_, r := newAPIServer(t, podJSON(t, deleted(kill, 30)))
	r.TracerProvider = tp
	_, err := r.DeletionTimestamp(t.Context())
	require.NoError(t, err)

	_, denied := newAPIServer(t, func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden")
	})
	denied.TracerProvider = tp
	_, err = denied.DeletionTimestamp(t.Context())
	require.Error(t, err)

	spans := rec.Ended()
	require.Len(t, spans, 2)
	for _, s := range spans {
		assert.Equal(t, "deadline.PodReader.Deletion", s.Name())
		assert.Equal(t, trace.SpanKindClient, s.SpanKind())
		assert.Equal(t, deadline.ScopeName, s.InstrumentationScope().Name)
		assert.Contains(t, s.Attributes(), attribute.String("k8s.pod.name", testPod))
		assert.Contains(t, s.Attributes(), attribute.String("k8s.namespace.name", testNamespace))
	}
	assert.Contains(t, spans[0].Attributes(), attribute.String("k8s.pod.deletion_timestamp", "2026-11-30T03:30:00Z"))
	assert.Contains(t, spans[0].Attributes(), attribute.Int64("k8s.pod.deletion_grace_period_seconds", 30))
	assert.Equal(t, codes.Unset, spans[0].Status().Code)
	assert.Equal(t, codes.Error, spans[1].Status().Code)
	assert.Contains(t, spans[1].Attributes(), attribute.Int("http.response.status_code", 403))
}
