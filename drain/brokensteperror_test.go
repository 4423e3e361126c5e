package drain

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/kube"
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

// deviceReport is a step's Detail that summarises itself, as ublk's Report
// does, from what its step found: a nil *deviceReport (the step's result
// returned as is beside its error), or one the step never filled, panics
// in String.
type deviceReport struct{ devices *[]string }

func (r *deviceReport) String() string { return fmt.Sprintf("%d devices stopped", len(*r.devices)) }

// A Step whose Detail's String panics (a nil *T returned beside the step's
// error, a report never filled) is posted in its StepFailed event with
// that said, and the steps after it run. The event's note read the
// Detail's String on the drain's goroutine, outside any recover, and the
// panic ended the process after the preserve phase: the later steps (a
// ublk teardown) never ran, no Report.
//
//	SIGTERM  2 sandboxes preserved
//	         step "ublk" returns its broken Detail and "devices busy": StepFailed, naming the Detail's type
//	         step "http" runs: StepFinished
func TestAStepDetailWhoseStringPanicsIsPostedNotACrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detail *deviceReport
	}{
		{"typed nil", nil},
		{"never filled", &deviceReport{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newPodAPI(t)
			pod, err := kube.New("sandboxd-0", api.cfg)
			require.NoError(t, err)
			var ran []string
			ublk := NewStep(stepPhase("ublk", time.Second), func(context.Context) (any, error) {
				return tc.detail, errors.New("devices busy")
			})
			f := newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 2, latency: time.Millisecond,
				steps: []Step{ublk, recordStep("http", time.Second, &ran)},
				edit:  func(c *Config) { c.Pod = pod }})

			rep := f.d.Shutdown(t.Context())

			require.NotNil(t, rep.Preserve)
			assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
			assert.Equal(t, Failed, rep.Phase("ublk").Result)
			assert.Equal(t, []string{"http"}, ran, "the step after it ran")
			notes := map[string]string{}
			for _, ev := range api.Events() {
				notes[ev.Reason] += ev.Note
			}
			assert.Contains(t, notes["StepFailed"], "step ublk: failed")
			assert.Contains(t, notes["StepFailed"], "devices busy")
			assert.Contains(t, notes["StepFailed"], "its Detail (*drain.deviceReport) panicked in String")
			assert.Contains(t, notes["StepFinished"], "step http: ok")
			assert.Contains(t, notes, "DrainFinished")
		})
	}
}
