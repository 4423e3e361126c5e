//go:build linux

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/pipenet"
	"github.com/drainkit/drainkit/pause"
)

// Fault: a pause of the preserve phase that got no answer, which the server
// went on with and finished before the final sweep listed. Listed paused, the
// sandbox was not in the sweep's listing of the ones not paused, and the
// preserve phase's entry stood: failed, 1 lost, the exit status 1, of a
// sandbox AgentENV had paused and made durable. The sweep now lists the
// paused ones when the preserve phase counted any lost it has no entry for,
// and each listed paused is preserved. In virtual time, AgentENV's double
// behind a proxy whose listings take 0.7 s, over HTTP:
//
//	0 s       SIGTERM (grace 100 s; preserve deadline 85 s, hard 95 s)
//	2.1 s     the pause of a sandbox of 83.2 GiB, 84.2 s long, is sent
//	86 s      the proxy drops its connection (its idle timeout): no answer,
//	          and past the phase deadline no retry: failed
//	86 s      server step: the sweep lists
//	86.3 s    AgentENV finishes the pause: paused, durable
//	86.7 s    the sweep's listings answer: listed paused, nothing to pause
//	before:   failed, 1 lost; now: preserved, 0 lost
func TestAPauseWithNoAnswerTheServerFinishedBeforeTheSweepIsPreserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := agentenvDouble(t, 0, fakeagentenv.Config{PauseBase: time.Second, PausePerGiB: time.Second})
		sb, err := srv.Create(85197) // 1 s + 83.2 s
		require.NoError(t, err)
		api := srv.Handler()
		t0 := time.Now()
		var dropped atomic.Bool
		proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodGet:
				time.Sleep(700 * time.Millisecond) // a listing of a busy server
			case !dropped.Swap(true):
				go api.ServeHTTP(httptest.NewRecorder(), r.Clone(context.WithoutCancel(r.Context())))
				time.Sleep(86*time.Second - time.Since(t0))
				conn, _, err := http.NewResponseController(w).Hijack()
				require.NoError(t, err)
				conn.Close()
				return
			}
			api.ServeHTTP(w, r)
		})}
		ln := pipenet.Listen("agentenv.test")
		go func() { _ = proxy.Serve(ln) }()
		client := &http.Client{Transport: &http.Transport{DialContext: ln.Dial}}

		rep := drainBeforeSIGTERM(t, client, hooks{}, "-grace", "100s", "-server-url", "http://agentenv.test")

		require.NotNil(t, rep.Preserve)
		assert.Equal(t, fakeagentenv.Paused, srv.States()[sb.SandboxID])
		assert.Equal(t, 1, srv.Stats().PauseRequests, "the one pause, which the server finished")
		e := entries(rep.Preserve)[sb.SandboxID]
		assert.Equal(t, pause.Preserved, e.Outcome, e.Error)
		assert.Contains(t, e.Error, "listed paused by the final sweep")
		assert.Contains(t, e.Error, "not preserved before: httpsource: pause", "why the preserve phase could not say")
		assert.Zero(t, rep.Lost())
		require.NotNil(t, rep.Phase(StepServer))
		assert.Equal(t, drain.OK, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
		require.NoError(t, proxy.Shutdown(context.Background()))
	})
}
