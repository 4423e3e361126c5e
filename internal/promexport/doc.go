// Package promexport exposes the OpenTelemetry metrics of drainkit's
// packages in the Prometheus text format, for the example servers'
// GET /metrics:
//
//	mp, handler, err := promexport.New()
//	drainer, err := drain.New(drain.Config{..., MeterProvider: mp})
//	mux.Handle("GET /metrics", handler)
//
// OTel instrument names become Prometheus names with dots as underscores,
// the unit as a suffix (_seconds) and _total on counters:
// drainkit.drain.phase.duration is drainkit_drain_phase_duration_seconds.
package promexport
