package promexport_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/promexport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestInstrumentsAppearUnderPrometheusNames(t *testing.T) {
	mp, h, err := promexport.New()
	require.NoError(t, err)
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m := mp.Meter("github.com/drainkit/drainkit/drain")
	hist, err := m.Float64Histogram("drainkit.drain.phase.duration", metric.WithUnit("s"))
	require.NoError(t, err)
	hist.Record(context.Background(), 1.5)
	ctr, err := m.Int64Counter("drainkit.pause.sandboxes", metric.WithUnit("{sandbox}"))
	require.NoError(t, err)
	ctr.Add(context.Background(), 3)

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	assert.Contains(t, body, "drainkit_drain_phase_duration_seconds_sum 1.5")
	assert.Contains(t, body, "drainkit_pause_sandboxes_total 3")
	assert.NotContains(t, body, "go_goroutines", "the provider's own registry, not the global one")
}
