package drain

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// ownEstimateSandbox estimates its own preserve (pause.Estimated).
type ownEstimateSandbox struct{ id string }

func (s ownEstimateSandbox) ID() string                       { return s.id }
func (s ownEstimateSandbox) Preserve(context.Context) error   { return nil }
func (s ownEstimateSandbox) EstimatedPreserve() time.Duration { return time.Second }

// The preserve reserve counts the sandboxes without an estimate of their
// own at the Estimator's, summed with the others' own in a mean; that sum
// overflowed with an estimate New accepts over enough listed sandboxes,
// where the rounds below it saturate: the mean went negative and the
// reserve fell to the longest own estimate, so the preStop wait would run
// on to a second before the deadline with 300 sandboxes of thousands of
// hours each to preserve.
//
//	grace 20000 h, estimate 10000 h, limit 1000: one round
//	300 sandboxes of the Estimator's and one of 1 s of its own:
//	the mean of one preserve ≈ 9967 h, the reserve the same
func TestThePreserveReserveDoesNotOverflowOverManyListedSandboxes(t *testing.T) {
	b, err := deadline.New(20000*time.Hour, deadline.Config{})
	require.NoError(t, err)
	node := fakesandbox.NewNode()
	d, err := New(Config{Budget: b, Sandboxes: node,
		Pause: pause.Config{Limit: 1000, Estimator: deadline.NewEstimator(10000 * time.Hour)}})
	require.NoError(t, err, "one round of 10000 h fits 20000 h")
	sbs := []pause.Sandbox{ownEstimateSandbox{"own"}}
	for i := range 300 {
		sbs = append(sbs, &fakesandbox.Sandbox{Name: fmt.Sprintf("vm-%d", i)})
	}
	d.record(t.Context(), sbs, nil)

	mean := 10000*time.Hour/301*300 + time.Second/301 // (1 s + 300 x 10000 h) / 301, to a nanosecond
	assert.InDelta(t, float64(mean), float64(d.preserveReserve()), float64(time.Millisecond), "one round of the mean: %v", d.preserveReserve())
}
