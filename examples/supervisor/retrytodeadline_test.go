//go:build linux

package main

import (
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the supervisor's Preservers kept pause's default retry policy,
// which gives a sandbox up after 5 min of retries in all, whatever time
// the phase has left: behind AgentENV's manifest (a grace of 3600 s), a
// server whose pauses failed for longer than that (its recoverable 500:
// the VM resumed, the pause to be tried again; a persistence volume
// unavailable for minutes) had every sandbox Failed at 5 min of a
// preserve phase of 59, and again by the final sweep at 10 min of its
// half hour: all lost, with most of the grace unused. The retries now end
// with the phase alone: pause's default retries so (docs/faults.md row
// 1920), and the supervisor's policy of its own is gone. In virtual time:
//
//	0 s      SIGTERM, grace 3600 s: 2 running sandboxes; every pause
//	         answered 500 until 12 min
//	12 min   the pauses succeed: both paused, the preserve phase ends
func TestPausesFailingLongerThanFiveMinutesAreRetriedUntilTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second})
		start := time.Now()
		api := srv.Handler()
		failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && time.Since(start) < 12*time.Minute {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"code":500,"message":"sandbox operation Pause failed: persistence unavailable"}`)
				return
			}
			api.ServeHTTP(w, r)
		})

		rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{failing}}, hooks{}, "-grace", "3600s")

		require.NotNil(t, rep.Preserve)
		assert.Zero(t, rep.Lost(), "%v", rep.Preserve.Entries)
		for _, id := range ids {
			e := entries(rep.Preserve)[id]
			assert.Equal(t, pause.Preserved, e.Outcome, "%s: %s", id, e.Error)
			assert.GreaterOrEqual(t, e.End.Sub(start), 12*time.Minute, "%s: paused once the server could", id)
			assert.Equal(t, fakeagentenv.Paused, srv.States()[id], id)
		}
	})
}
