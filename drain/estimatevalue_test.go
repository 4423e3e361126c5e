package drain

import (
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// The warning that preserves took much longer than the estimate gave a
// ratio ("took 3.5 times the estimate") and sent the operator to "set the
// estimate to what one takes on this node" without the value, which the
// drain had measured: the operator multiplied a rounded ratio by the
// estimate. It now names the value, the median time the preserves counted
// with the Estimator's estimate took, rounded up to a tenth of a second
// (a timed out one's time is a lower bound: "at least").
//
//	0 s     SIGTERM, no preStop: grace 8 s, 20 sandboxes of 3.5 s (no estimate of their own), limit 8, estimate 1 s
//	3.5 s   8 preserved; the next 8 timed out at the hard deadline (6.5 s), after 3 s
func TestPreservesMuchLongerThanTheEstimateNameTheEstimateToSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs logbuf.Buffer
		f := newFixture(t, fixtureOpts{grace: 8 * time.Second, latency: time.Second, limit: 8,
			edit: logAt(&logs, slog.LevelWarn)})
		for i := range 20 {
			f.node.Add(&fakesandbox.Sandbox{Name: "vm-" + string(rune('a'+i)), Latency: 3500 * time.Millisecond})
		}
		rep := f.d.ServeSignals(t.Context(), sigterm())

		require.Error(t, rep.Err())
		p := rep.Phase(PhasePreserve)
		assert.Contains(t, p.Error, "preserves took 3.5 times the estimate the plan counted")
		assert.Contains(t, p.Error, "; set the estimate to at least 3.5s, the median time the 16 counted with it took")
		assert.Contains(t, logs.String(), `level=WARN msg="drain: preserves took much longer than the estimate the plan counted: set the estimate to what one takes on this node" times=3.5 measured=16 estimator=1s set_to=3.5s`)
	})
}
