//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// Fault (a review of the escalate step against the Preserver's hard deadline): the
// escalations begun at the preserve phase's deadline wait for a checkpoint in flight until
// the escalate step's deadline (+6 s at an 8 s grace), and the Preserver waits for it until
// its hard deadline, after that (+6.5 s): the step begins then with no time left. A
// checkpoint still running then is given up (a started runsc checkpoint is never cut),
// and a sandbox is never signalled mid-checkpoint: when it then fails, the sandbox runs
// unsignalled into SIGKILL, neither preserved nor signalled. No layout reaches it (the
// escalate step's window from the preserve deadline is what the early escalations
// already give it); the step's error said only "still in flight at the escalate step's
// deadline: not signalled", as if it had waited through its window, and nothing of what
// a failure after it leaves. It now says why, and what is left.
//
//	0          the drain begins; the one checkpoint is held
//	+4.5 s     the preserve deadline: the escalations wait for the checkpoint
//	+6 s       the escalate step's deadline, as planned: they give up
//	+6.5 s     the Preserver's hard deadline: it gives the checkpoint up; the step begins, no time left
//	+6.7 s     the checkpoint fails: the sandbox runs on, never signalled
func TestCheckpointHeldPastTheEscalateStepIsNamedWithWhy(t *testing.T) {
	w, d, id, first, ended := drainingOne(t, map[string]string{"hold": "", "fail": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	plan := w.drainer.Plan().Windows(drain.PhasePreserve)
	hard, stepEnd := plan[0].Hard, plan[1].Deadline
	require.True(t, hard.After(stepEnd), "the Preserver's hard deadline is not after the escalate step's")
	time.Sleep(time.Until(hard.Add(200 * time.Millisecond)))
	d.release("hold", id)
	rep := <-ended
	require.Eventually(t, func() bool { return len(w.stops.inFlight()) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the checkpoint did not end")

	lines := d.calls(rep.Start)
	pre := preservePhase(t, rep, first)
	require.Len(t, rep.Preserve.Entries, 1)
	assert.Equal(t, pause.TimedOut, rep.Preserve.Entries[0].Outcome, rep.Preserve.Entries[0].Error)
	t.Logf("hard deadline +%v (phase %s)", hard.Sub(rep.Start).Round(time.Millisecond), pre.Result)
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("escalate step planned to +%v; ran +%v to +%v: %s %v", stepEnd.Sub(rep.Start).Round(time.Millisecond),
		esc.Start.Sub(rep.Start).Round(time.Millisecond), esc.End.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	assert.Equal(t, drain.TimedOut, esc.Result)
	assert.Contains(t, esc.Error, id+": "+errCheckpointHeldPastStep.Error(), "the step's error does not say why it could not signal the sandbox")
	assert.NotContains(t, lines, "kill "+id+" 15", "the step's error says nothing signals it")
}
