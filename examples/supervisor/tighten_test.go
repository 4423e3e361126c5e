//go:build linux

package main

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/pause"
)

// The daemon step has the ublk teardown's Tighten, which drain calls when
// its budget moves SIGKILL earlier during the step or Force leaves it its
// reserve: the teardown lays its control fallback and kill out again
// before the new deadline (rows 496-498). Made by drain.NewStep alone, it
// had none, and drain only cancelled the teardown there, its late stages
// never run.
func TestDaemonStepHasTheTeardownsTighten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := parseArgs([]string{"-grace", "100s", "-daemon", "ublkd", "--", "server"}, io.Discard)
		require.NoError(t, err)
		sup, err := newSupervisor(cfg, io.Discard)
		require.NoError(t, err)
		var daemon drain.Step
		for _, st := range sup.steps {
			if st.Phase().Name == StepDaemon {
				daemon = st
			}
		}
		require.NotNil(t, daemon)
		tt, ok := daemon.(interface{ Tighten(time.Time) bool })
		require.True(t, ok, "the daemon step has a Tighten method")
		assert.False(t, tt.Tighten(time.Now().Add(time.Second)), "the teardown's: nothing to move with no teardown in progress")
	})
}

// Fault: the final sweep was laid out once, in the server step's deadline
// as it stood at the sweep's start, and a budget that moved SIGKILL
// earlier while it ran (a deletion read with a shorter grace) cancelled
// its context, which stops new pauses but leaves the ones in flight to
// the hard deadline of that layout, past the step's new deadline: the step
// did not return, drain abandoned it, the server's SIGTERM waited for the
// sweep (in the daemon step's time), and the sandbox whose pause was in
// flight was in no account. The sweep is now laid out again in what is
// left (serverStep.Tighten), in virtual time:
//
//	0 s      SIGTERM (grace 100 s): 2 sandboxes of 1 GiB paused in 2 s; a
//	         third, of 74 GiB, is being snapshotted until 3 s
//	2 s      server step (until 95 s): the sweep retries the third's 409
//	3.x s    its snapshot over, its pause starts: 75 s
//	10 s     a deletion read: SIGKILL at 30 s, the step's deadline 27 s
//	20.75 s  three quarters of the step as it is now: the sweep gives up
//	23.9 s   seven eighths: the server has not finished it: lost; SIGTERM
//	27 s     the step's deadline (before: abandoned here, the sweep's
//	         pause in flight until 71.75 s, the old three quarters)
func TestFinalSweepEndsByTheServerStepsDeadlineWhenTheBudgetMovesSIGKILLEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, big := sweptLate(t)
		t0 := time.Now()
		var sigterm time.Time
		h := hooks{
			made: func(sup *supervisor) {
				go func() {
					time.Sleep(10 * time.Second)
					assert.True(t, sup.budget.Tighten(t0.Add(30*time.Second)), "the deletion's 30 s")
				}()
			},
			atSIGTERM: func() { sigterm = time.Now() },
		}
		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, h, "-grace", "100s")

		step := rep.Phase(StepServer)
		require.NotNil(t, step)
		assert.Equal(t, t0.Add(27*time.Second), step.Deadline, "the 30 s grace's margin is 3 s")
		assert.Equal(t, drain.Failed, step.Result, step.Error)
		assert.Contains(t, step.Error, big, "the sandbox the sweep did not pause is named")
		assert.Equal(t, t0.Add(2*time.Second+25*time.Second*7/8), sigterm, "the server's SIGTERM at seven eighths of the step as it is now")
		require.NotNil(t, rep.Preserve)
		e, ok := entries(rep.Preserve)[big]
		require.True(t, ok, "the sandbox whose pause the sweep gave up on is accounted for")
		assert.Equal(t, pause.TimedOut, e.Outcome)
		gaveUp := t0.Add(2*time.Second + 25*time.Second*3/4)
		assert.WithinRange(t, e.End, gaveUp, gaveUp.Add(100*time.Millisecond), "given up on at three quarters of the step as it is now")
		assert.Equal(t, 1, rep.Lost())
		time.Sleep(time.Minute) // the double goes on with that pause, as AgentENV would, until 78 s
	})
}
