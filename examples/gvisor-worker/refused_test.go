//go:build linux

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of the worker's drain on real runsc): a checkpoint whose call never
// reached its sandbox (`urpc method "containerManager.Checkpoint" failed: connection
// reset by peer`, row 1393: no save began) had runsc.Runtime.Checkpoint wait up to
// StopWait (10 s) for the container to stop, in case its process was ending; a sandbox
// that runs on does not, and the wait ran whatever the drain's deadline, which the
// examples' Runsc.Pause does not pass to a checkpoint (never cut). Refused at the drain's
// start (grace 8 s: preserve deadline +4.5 s, escalate step to +6.5 s, hard +6.5 s), the
// sandbox was held by that wait past every deadline: the Report said "its checkpoint
// still runs (a started checkpoint is never cut)", timed out, and the escalate step "its
// checkpoint was still in flight at the escalate step's deadline: not signalled"; no
// SIGTERM, no SIGKILL reached it (0 kills). The call's failure is now returned once the
// container is seen not stopped: the Preserver retries it within its deadline, and the
// Report's entry says the call never reached the sandbox; the escalation signals it at
// the preserve phase's deadline.
func TestSandboxWhoseCheckpointCallNeverReachesItIsSaidAndSignalled(t *testing.T) {
	_, d, id, _, ended := drainingOne(t, map[string]string{"reset": ""})
	rep := <-ended
	lines := d.calls(rep.Start)

	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	t.Logf("%s: %s after %d attempts, at +%v: %s", e.ID, e.Outcome, e.Attempts, e.End.Sub(rep.Start), e.Error)
	assert.Equal(t, pause.Failed, e.Outcome, "before: timed out, its checkpoint said to run on")
	assert.Contains(t, e.Error, "connection reset by peer", "the Report says what became of the checkpoint")
	assert.NotContains(t, e.Error, "still runs", "before: no checkpoint ran, yet the Report said one did")

	assert.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "kill "+id+" 15") }),
		"before: never signalled, its actor never told to save itself")
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	assert.NotContains(t, esc.Error, "still in flight", "before: a refused checkpoint held it past the step")
	assert.NotEqual(t, drain.Failed, esc.Result, esc.Error)
}
