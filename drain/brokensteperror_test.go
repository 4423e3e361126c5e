package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/pause"
)

// A Step whose Run returns an error whose methods panic (a typed nil, an
// Error reading an answer that never came: listingErrors) fails, its
// PhaseReport naming the error's type, and the steps after it run. The
// step phase met it outside any recover (errors.Is's Unwrap, then
// err.Error()), and the panic ended the process after the preserve
// phase: the later steps (a ublk teardown) never ran, no Report.
//
//	0 s    SIGTERM: 3 sandboxes preserved (1 s each, one at a time)
//	3 s    step "release" returns the broken error: Failed, naming its type
//	3 s    step "teardown" runs: OK
func TestAStepErrorWhoseMethodsPanicFailsTheStepNotTheProcess(t *testing.T) {
	for _, tc := range listingErrors {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ran []string
				release := NewStep(stepPhase("release", time.Second), func(context.Context) (any, error) { return nil, tc.err })
				f := newFixture(t, fixtureOpts{grace: time.Minute, sandboxes: 3, latency: time.Second,
					steps: []Step{release, recordStep("teardown", time.Second, &ran)}})

				rep := f.d.Shutdown(context.Background())

				require.NotNil(t, rep.Preserve)
				assert.Equal(t, 3, rep.Preserve.Counts[pause.Preserved])
				p := rep.Phase("release")
				require.NotNil(t, p)
				assert.Equal(t, Failed, p.Result)
				assert.Contains(t, p.Error, "step release "+tc.says)
				assert.Equal(t, []string{"teardown"}, ran, "the step after it ran")
				assert.Equal(t, OK, rep.Phase("teardown").Result)
				assert.ErrorContains(t, rep.Err(), "release: failed: drain: step release "+tc.says)
			})
		})
	}
}
