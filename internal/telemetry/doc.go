// Package telemetry holds what drainkit's packages share in their
// OpenTelemetry instruments: the histogram boundaries for durations.
//
// Every metric drainkit records is named drainkit.<area>.<name> in the
// OpenTelemetry semantic-convention style: lower case, dot-separated, the
// unit in metric.WithUnit (UCUM: "s", "{sandbox}"), never in the name.
// Attribute keys follow the same rule under the same prefix.
package telemetry
