//go:build linux

package main

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the final sweep pauses every sandbox it lists running, the ones the
// preserve phase could not pause too (AgentENV answering their pause 500, or 401 to
// a key it refuses: they never stopped running), and said of all of them that they
// were running AGAIN after the preserve phase, "resumed or created": the server
// step's error, which the termination message carries ("server failed: final sweep:
// 1 of 2 sandboxes running again after the preserve phase not paused: ID(failed)"),
// and the ERROR line sent the operator looking for users' resumes, where the cause
// was the server's answer to the preserve phase. They are now told apart: the ones
// the preserve phase could not pause, tried again and not paused either, and the
// ones running again. On loopback, AgentENV's double:
//
//	preserve phase   3 sandboxes; every pause of one answers 500 (AgentENV's
//	                 error body), retried until the preserve deadline: failed
//	server step      a user resumes one of the 2 paused; the sweep lists both
//	                 running, pauses the resumed one, and the other's 500 again
func TestSweepTellsWhatThePreservePhaseCouldNotPauseFromWhatRunsAgain(t *testing.T) {
	srv, ids := agentenvDouble(t, 3, fakeagentenv.Config{PauseBase: 10 * time.Millisecond})
	failing, resumed := ids[0], ids[1]
	ts := agentenvFailing(t, srv, func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.URL.Path == "/sandboxes/"+failing+"/pause"
	}, "rootfs restack: daemon RPC timed out")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	var log logbuf.Buffer
	rep := drainBeforeSIGTERM(t, &http.Client{Transport: tr}, hooks{
		made: func(s *supervisor) { s.log = slog.New(slog.NewTextHandler(&log, nil)) },
		beforeStep: func() {
			done, err := srv.BeginResume(resumed)
			require.NoError(t, err)
			done()
		},
	}, "-server-url", ts.URL, "-grace", "10s", "-concurrency", "4")

	require.NotNil(t, rep.Preserve)
	byID := entries(rep.Preserve)
	assert.Equal(t, pause.Failed, byID[failing].Outcome, byID[failing].Error)
	assert.Equal(t, pause.Preserved, byID[resumed].Outcome, "the sweep paused the resumed one")
	assert.Equal(t, 1, rep.Lost())
	step := rep.Phase(StepServer)
	require.NotNil(t, step)
	assert.Equal(t, drain.Failed, step.Result)
	assert.Equal(t, "final sweep: 1 of 1 sandboxes the preserve phase could not pause, still running, not paused either: "+failing+"(failed)", step.Error)
	assert.NotContains(t, step.Error, "running again")
	lines := strings.Split(log.String(), "\n")
	var again, notPaused string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "final sweep: sandboxes running again"):
			again = l
		case strings.Contains(l, "final sweep: sandboxes the preserve phase could not pause"):
			notPaused = l
		}
	}
	assert.Contains(t, again, "found=1 paused=1 lost=0 ids="+resumed+"(preserved)", "the one resumed, and only it")
	assert.Contains(t, notPaused, "level=ERROR")
	assert.Contains(t, notPaused, "found=1 paused=0 lost=1 ids="+failing+"(failed)")
}
