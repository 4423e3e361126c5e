package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/pause"
)

// A sandbox the preserve phase could not pause (its server answered every
// pause with an error) still runs, and a server step's final sweep lists
// it. A sweep that makes no Preserve call for it (forced: a supervisor's
// sends no pause; or its time ran out first) accounts for it not_started,
// and the merged entry keeps why the phase could not pause it after the
// sweep's own word: the last error a Preserve returned. Fault: the merge
// replaced the entry with the sweep's, and the Report said "force mode: no
// new pause is sent", or nothing, where the server's refusal kept the
// sandbox running (the supervisor worked around one case, row 1764).
//
//	0 s  preserve: sb-0 preserving; broken's pause fails, permanent
//	1 s  sb-0 preserved
//	1 s  server step: its sweep lists broken, sends no pause: not_started
//	end  broken: not_started, 1 attempt, with the phase's error
func TestSweepThatSentNoPauseKeepsWhyThePreservePhaseCouldNot(t *testing.T) {
	for _, tc := range []struct {
		fault                draintest.Fault
		sweepSays, entrySays string
	}{
		{draintest.Permanent, "force mode: no new pause is sent", "force mode: no new pause is sent; not preserved before: draintest: permanent failure"},
		{draintest.Permanent, "", "draintest: permanent failure"},
		{draintest.Panic, "", "pause: Preserve of broken panicked: draintest: injected panic"},
	} {
		t.Run(tc.entrySays, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var f *fixture
				server := NewStep(stepPhase("server", time.Second), func(ctx context.Context) (any, error) {
					return sendNoPause(ctx, f.node, tc.sweepSays), nil
				})
				f = newFixture(t, fixtureOpts{grace: time.Hour, sandboxes: 1, latency: time.Second, limit: 2, steps: []Step{server}})
				f.node.Add(&draintest.Sandbox{Name: "broken", Latency: 10 * time.Millisecond, Faults: []draintest.Fault{tc.fault}})

				rep := f.d.Shutdown(context.Background())
				require.NotNil(t, rep.Preserve)
				require.Len(t, rep.Preserve.Entries, 2)
				e := rep.Preserve.Entries[1]
				assert.Equal(t, "broken", e.ID)
				assert.Equal(t, pause.NotStarted, e.Outcome)
				assert.Equal(t, 1, e.Attempts)
				assert.Equal(t, tc.entrySays, e.Error)
				if tc.fault == draintest.Panic {
					assert.Contains(t, e.Stack, "draintest", "the panic's stack, kept")
				}
				assert.Equal(t, 1, rep.Lost())
			})
		})
	}
}

// sendNoPause is a final sweep that sends no pause: every sandbox node
// lists is not_started, with says as its error.
func sendNoPause(ctx context.Context, node *draintest.Node, says string) *pause.Report {
	sbs, _ := node.List(ctx)
	rep := &pause.Report{Passes: 1, Counts: map[pause.Outcome]int{}}
	for _, sb := range sbs {
		rep.Entries = append(rep.Entries, pause.Entry{ID: sb.ID(), Outcome: pause.NotStarted, Pass: 1, Error: says})
		rep.Counts[pause.NotStarted]++
	}
	return rep
}
