package drain

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a server step that ran a final sweep (the supervisor's, for
// sandboxes resumed after the preserve phase's last listing) lost a
// sandbox, and the step failed, but the Drainer's "drain: shutdown
// finished" line and its DrainFinished Event were written from the
// preserve phase's account alone: lost=0, "3 of 3 sandboxes preserved, 0
// lost", while the caller's Report, after it merged the sweep, its JSON and
// its exit status counted the loss. A step's sweep (its Detail a
// *pause.Report) is now merged before anything is reported, and
// SandboxesLost names what it lost.
//
//	preserve  sb-0, sb-1, sb-2 preserved
//	server    sb-0 runs again (resumed) and "late" was created: the sweep
//	          preserves late, sb-0's pause fails; the step fails
//	end       lost=1 in the log line, the Event, Report.Err and Lost
func TestStepsSweepIsInTheLogLineTheEventAndTheReport(t *testing.T) {
	api := newPodAPI(t)
	pod, err := kube.New("sandboxd-0", api.cfg)
	require.NoError(t, err)
	var logs bytes.Buffer
	var node *draintest.Node
	server := NewStep(stepPhase("server", time.Second), func(ctx context.Context) (any, error) {
		node.Add(&draintest.Sandbox{Name: "sb-0", Latency: time.Millisecond, Faults: []draintest.Fault{draintest.Permanent}},
			&draintest.Sandbox{Name: "late", Latency: time.Millisecond})
		p, err := pause.New(node, pause.Config{Estimator: deadline.NewEstimator(time.Millisecond)})
		if err != nil {
			return nil, err
		}
		dl, _ := ctx.Deadline()
		sweep := p.Run(ctx, dl)
		if n := sweep.Lost(); n > 0 {
			return sweep, fmt.Errorf("final sweep: %d not preserved", n)
		}
		return sweep, nil
	})
	f := newFixture(t, fixtureOpts{grace: time.Hour, margin: time.Second, sandboxes: 3, latency: time.Millisecond,
		steps: []Step{server},
		edit:  func(c *Config) { c.Pod, c.Logger = pod, slog.New(slog.NewTextHandler(&logs, nil)) }})
	node = f.node

	rep := f.d.Shutdown(t.Context())
	require.NotNil(t, rep.Preserve)
	assert.Equal(t, 1, rep.Lost())
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 3, pause.Failed: 1}, rep.Preserve.Counts)
	require.Len(t, rep.Preserve.Entries, 4)
	assert.Equal(t, pause.Entry{ID: "sb-0", Outcome: pause.Failed, Relisted: 1}, pause.Entry{
		ID: rep.Preserve.Entries[0].ID, Outcome: rep.Preserve.Entries[0].Outcome, Relisted: rep.Preserve.Entries[0].Relisted})
	assert.Equal(t, "late", rep.Preserve.Entries[3].ID)
	assert.Equal(t, pause.Preserved, rep.Preserve.Entries[3].Outcome)
	require.Error(t, rep.Err())
	assert.Contains(t, rep.Err().Error(), "1 sandbox(es) not preserved")
	assert.Equal(t, OK, rep.Phase(PhasePreserve).Result, "the preserve phase did its part")
	assert.Equal(t, Failed, rep.Phase("server").Result)

	var finished string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="drain: shutdown finished"`) {
			finished = l
		}
	}
	require.NotEmpty(t, finished, logs.String())
	assert.Contains(t, finished, "level=ERROR")
	assert.Contains(t, finished, " report.preserved=3 report.lost=1 report.sandboxes=4 ")

	var reasons []string
	byReason := map[string]eventsv1.Event{}
	for _, ev := range api.Events() {
		reasons = append(reasons, ev.Reason)
		byReason[ev.Reason] = ev
	}
	require.Equal(t, []string{"DrainStarted", "SandboxesLost", "StepFailed", "DrainFinished"}, reasons)
	assert.Equal(t, kube.Warning, byReason["SandboxesLost"].Type)
	assert.Equal(t, "server", byReason["SandboxesLost"].Action)
	assert.Contains(t, byReason["SandboxesLost"].Note, "step server swept the sandboxes running again after the preserve phase: 1 of 2 sandboxes not preserved: sb-0(failed)")
	assert.Equal(t, kube.Warning, byReason["DrainFinished"].Type)
	assert.Contains(t, byReason["DrainFinished"].Note, "3 of 4 sandboxes preserved, 1 lost")
	assert.Contains(t, byReason["DrainFinished"].Note, "1 sandbox(es) not preserved")
}

// The final sweep's account merged into the preserve phase's: a sandbox
// the phase preserved and the sweep found running again takes the sweep's
// outcome (preserved again, or lost), one more relisting and the attempts
// of both; one the sweep's pause found already paused (gone) stays
// preserved; one created after the phase gets its own entry, listed by
// the pass after the phase's; the counts are of the merged entries.
func TestSweepIsMergedIntoThePreservePhasesAccount(t *testing.T) {
	phase := &pause.Report{Passes: 2, Entries: []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 2, Relisted: 1},
		{ID: "c", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "d", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
	}, Counts: map[pause.Outcome]int{pause.Preserved: 4}}
	sweep := &pause.Report{Passes: 2, Entries: []pause.Entry{
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "c", Outcome: pause.TimedOut, Pass: 1, Attempts: 1, Error: "deadline"},
		{ID: "d", Outcome: pause.Vanished, Pass: 1, Attempts: 1, Error: "gone"},
		{ID: "e", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
	}}
	mergeSweep(phase, sweep)

	assert.Equal(t, []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 3, Relisted: 2},
		{ID: "c", Outcome: pause.TimedOut, Pass: 1, Attempts: 2, Relisted: 1, Error: "deadline"},
		{ID: "d", Outcome: pause.Preserved, Pass: 1, Attempts: 2, Relisted: 1},
		{ID: "e", Outcome: pause.Preserved, Pass: 3, Attempts: 1},
	}, phase.Entries)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 4, pause.TimedOut: 1}, phase.Counts)
	assert.Equal(t, 1, phase.Lost())
	assert.Equal(t, 4, phase.Passes)
}

// A sweep whose listing had an ID twice reports the second as a flaw of
// its own (Failed, "more than once in the listing"), as any pause Report does: the merge
// keeps it as its own entry and never lets it overwrite the sandbox's
// account. Before, the flaw replaced the merged outcome of the sandbox,
// preserved again, with Failed.
func TestSweepListingAnIDTwiceKeepsTheSandboxsAccount(t *testing.T) {
	phase := &pause.Report{Passes: 2, Entries: []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
	}, Counts: map[pause.Outcome]int{pause.Preserved: 1}}
	sweep := &pause.Report{Passes: 1, Entries: []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "a", Outcome: pause.Failed, Pass: 1, Error: `ID "a" more than once in the listing`},
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "b", Outcome: pause.Failed, Pass: 1, Error: `ID "b" more than once in the listing`},
	}}
	mergeSweep(phase, sweep)

	assert.Equal(t, []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 2, Relisted: 1},
		{ID: "a", Outcome: pause.Failed, Pass: 3, Error: `ID "a" more than once in the listing`},
		{ID: "b", Outcome: pause.Preserved, Pass: 3, Attempts: 1},
		{ID: "b", Outcome: pause.Failed, Pass: 3, Error: `ID "b" more than once in the listing`},
	}, phase.Entries)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 2, pause.Failed: 2}, phase.Counts)
}

// An Incomplete account (every preserve listing failed after its first
// page) stays so when merged with a run or sweep that could not list
// completely either, and is no longer once one listed the node whole:
// what was running then is in the merged account.
func TestCompleteSweepEndsAnIncompleteAccount(t *testing.T) {
	for _, tc := range []struct {
		sweep      pause.Report
		incomplete bool
	}{
		{pause.Report{Incomplete: true, ListErr: "page 2: 503"}, true},
		{pause.Report{}, false},
	} {
		phase := &pause.Report{Passes: 1, Incomplete: true, ListErr: "page 2: 503", Entries: []pause.Entry{
			{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		}}
		sweep := tc.sweep
		sweep.Passes, sweep.Entries = 1, []pause.Entry{{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 1}}
		mergeSweep(phase, &sweep)
		assert.Equal(t, tc.incomplete, phase.Incomplete, "sweep incomplete: %v", sweep.Incomplete)
		assert.Len(t, phase.Entries, 2)
	}
}
