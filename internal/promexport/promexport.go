package promexport

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// New returns a MeterProvider whose metrics handler serves in the
// Prometheus text format, through the OTel Prometheus exporter. The
// registry is the provider's own, not the process-global one: what the
// provider's meters record and nothing else.
func New() (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("promexport: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
