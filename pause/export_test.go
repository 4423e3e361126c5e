package pause

// Internal values the external tests assert against.
const (
	DefaultLimit   = defaultLimit
	ReturnSlack    = returnSlack
	AbandonAfter   = abandonAfter
	MetricDuration = metricDuration
	MetricOutcomes = metricOutcomes
	MetricInFlight = metricInFlight
)
