//go:build linux

package main

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault: in front of AgentENV, a pause answered 200 OK that did not pause its
// sandbox (something in front of AgentENV answering for it, a server that does
// not pause; AgentENV's own answer is 204 once the sandbox is paused) was counted
// preserved, and so was the sandbox at the drain's end, still running: the preserve
// phase and the final sweep each listed it running again after every such "pause",
// sent another, and took the last 200 for done. The Report said preserved, 0 lost,
// no error, and the sweep's line said it was running AGAIN ("resumed or created"),
// while AgentENV's next listing showed it running, to be lost at its SIGTERM. The
// sweep now lists once more after its Run, when it preserved any, and a sandbox it
// preserved that AgentENV lists running is Failed, saying why. In virtual time,
// AgentENV's double, 3 sandboxes, every pause of one answered 200 without pausing:
//
//	before: 14 pauses answered 200, preserved, lost 0, Err nil
//	now:    failed, lost 1, the server step's error and the ERROR line naming it
func TestSweepDoesNotCountPreservedASandboxAgentENVStillListsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 3, fakeagentenv.Config{PauseBase: 10 * time.Millisecond})
		h := srv.Handler()
		liar := ids[0]
		answered200 := 0
		wrap := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/sandboxes/"+liar+"/pause" {
				answered200++
				w.WriteHeader(http.StatusOK)
				return
			}
			h.ServeHTTP(w, r)
		})
		var log logbuf.Buffer
		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{wrap}}, hooks{
			made: func(s *supervisor) { s.log = slog.New(slog.NewTextHandler(&log, nil)) },
		}, "-grace", "10s")

		assert.Equal(t, map[string]string{liar: "running", ids[1]: "paused", ids[2]: "paused"}, srv.States())
		assert.Greater(t, answered200, 1)
		byID := entries(rep.Preserve)
		assert.Equal(t, pause.Failed, byID[liar].Outcome, byID[liar].Error)
		assert.Contains(t, byID[liar].Error, "AgentENV lists it running after the final sweep")
		assert.Equal(t, pause.Preserved, byID[ids[1]].Outcome)
		assert.Equal(t, 1, rep.Lost())
		require.Error(t, rep.Err())
		step := rep.Phase(StepServer)
		require.NotNil(t, step)
		assert.Equal(t, drain.Failed, step.Result)
		assert.Contains(t, step.Error, liar+"(failed)")
		var line string
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "listed running after the final sweep") {
				line = l
			}
		}
		assert.Contains(t, line, "level=ERROR")
		assert.Contains(t, line, "sandbox="+liar)
	})
}
