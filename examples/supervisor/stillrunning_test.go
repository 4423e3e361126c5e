//go:build linux

package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the final sweep's check that no sandbox it preserved is still listed running
// (stillRunning, row 1372) came after its wait for the pauses it gave up on
// (finishedLate), in the same context, which ends at seven eighths of the server
// step. A pause the server was still finishing then held the wait to that end, the
// check's listing was cut before it was sent, and the check was skipped with a Warn:
// a sandbox whose pause a proxy answered 200 without pausing it stayed preserved in
// the Report, and ran into the server's SIGTERM. The check now lists before that
// wait. In virtual time, AgentENV's double behind a proxy, over HTTP:
//
//	0 s      SIGTERM (grace 100 s): 2 sandboxes of 1 GiB paused in 2 s; a third, of
//	         100 GiB, is being snapshotted until 3 s
//	2 s      server step: a user creates a fourth, whose pauses the proxy answers 200
//	         without pausing it; the sweep "pauses" it, and the third from 3 s (101 s)
//	3/4      the sweep gives up on the third, which AgentENV goes on pausing
//	7/8      the wait for it ends, the third still being paused
//	before:  the check's listing cut at once: the fourth preserved, 1 lost
//	now:     the check lists at 3/4: the fourth failed, 2 lost
func TestSweepChecksWhatItPreservedWhenTheWaitForLatePausesUsesItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 2, fakeagentenv.Config{PauseBase: time.Second, PausePerGiB: time.Second})
		big, err := srv.Create(100 * 1024)
		require.NoError(t, err)
		endSnapshot, err := srv.Snapshot(big.SandboxID)
		require.NoError(t, err)
		go func() { time.Sleep(3 * time.Second); endSnapshot() }()

		var lied atomic.Pointer[string] // the fourth's pause path, once it is created
		api := srv.Handler()
		proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if p := lied.Load(); p != nil && r.Method == http.MethodPost && r.URL.Path == *p {
				w.WriteHeader(http.StatusOK) // not paused
				return
			}
			api.ServeHTTP(w, r)
		})}
		ln := pipenet.Listen("agentenv.test")
		go func() { _ = proxy.Serve(ln) }()
		client := &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}

		var fourth string
		rep := drainBeforeSIGTERM(t, client, hooks{beforeStep: func() {
			sb, err := srv.Create(1024)
			require.NoError(t, err)
			fourth = sb.SandboxID
			path := "/sandboxes/" + fourth + "/pause"
			lied.Store(&path)
		}}, "-grace", "100s", "-server-url", "http://agentenv.test")

		require.NotNil(t, rep.Preserve)
		states := srv.States()
		assert.Equal(t, fakeagentenv.Running, states[fourth], "the proxy's 200 did not pause it")
		assert.Equal(t, fakeagentenv.Pausing, states[big.SandboxID], "still being paused after the wait")
		byID := entries(rep.Preserve)
		assert.Equal(t, pause.Failed, byID[fourth].Outcome, byID[fourth].Error)
		assert.Contains(t, byID[fourth].Error, "AgentENV lists it running after the final sweep")
		assert.Equal(t, pause.TimedOut, byID[big.SandboxID].Outcome, byID[big.SandboxID].Error)
		assert.Equal(t, 2, rep.Lost(), "the fourth, running, and the third, not paused yet")
		// The server ends the third's pause (AgentENV's shutdown waits for it).
		require.NoError(t, proxy.Shutdown(context.Background()))
	})
}
