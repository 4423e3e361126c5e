package deadline

// The default margin's bounds and rule, for the tests.
const (
	DefaultMargin        = maxMargin
	MinimumDefaultMargin = minMargin
)

// DefaultMarginFor is the margin of a Budget whose Config.Margin is zero.
var DefaultMarginFor = defaultMargin
