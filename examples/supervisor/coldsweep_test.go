//go:build linux

package main

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/pause"
)

// Fault: the final sweep after a preserve phase that measured nothing. The
// sweep's Preserver is fixed at the drain's Preserver.Limit, and an
// adaptive Preserver that has preserved nothing reports 1 (a cold node's
// plan counts one preserve at a time, row 940): the sweep paused one
// sandbox at a time, in a window the plan had sized for the preserve
// phase's pauses. In front of AgentENV, sandboxes snapshotted through the
// preStop wait and the preserve phase are exactly that: the wait counts
// them, the preserve phase lists none running, the sweep finds them all,
// in virtual time, pauses of 1 s (-concurrency 0, no level learned):
//
//	0 s      preStop (grace 60 s: margin 5 s, server step 6 s): 12
//	         sandboxes being snapshotted, none running
//	36.7 s   the wait ends, 12 pauses of 1 s reserved (one at a time)
//	37 s     SIGTERM: the preserve phase lists none running; the server
//	         step and its sweep begin (deadline 55 s, starts by 46 s)
//	37.1 s   the snapshots end
//	before:  one at a time, 9 paused by 46.1 s, 3 not started: lost
//	now:     from the adaptive limit's start, as the drain's Run starts:
//	         all 12 paused by 39.2 s
func TestFinalSweepAfterAPreservePhaseThatMeasuredNothingPausesInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids, rep, sup := sweepAfterSnapshots(t)

		assert.Equal(t, 1, sup.preserver.Limit(), "the preserve phase measured nothing: the plan counts one at a time")
		assert.Equal(t, len(ids), rep.Preserve.Counts[pause.Preserved], srv.States())
		assert.Zero(t, rep.Lost())
		for _, id := range ids {
			assert.Equal(t, fakeagentenv.Paused, srv.States()[id], id)
		}
		assert.Greater(t, srv.Stats().MaxInPause, 1, "the sweep paused in parallel")
		require.NotNil(t, rep.Phase(StepServer))
		assert.Equal(t, drain.OK, rep.Phase(StepServer).Result, rep.Phase(StepServer).Error)
	})
}

// The operator's -concurrency is the sweep's limit, cold or not: the same
// drain at -concurrency 1 pauses one at a time, and loses the 3 that did
// not fit.
func TestFinalSweepKeepsAFixedConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, ids, rep, _ := sweepAfterSnapshots(t, "-concurrency", "1")

		assert.Equal(t, 1, srv.Stats().MaxInPause)
		assert.Equal(t, len(ids)-3, rep.Preserve.Counts[pause.Preserved], srv.States())
		assert.Equal(t, 3, rep.Preserve.Counts[pause.NotStarted])
	})
}

// sweepAfterSnapshots drains 12 sandboxes of the AgentENV double, pauses of
// 1 s, each being snapshotted from before the preStop call until 100 ms
// after SIGTERM (grace 60 s, args added), and returns the double, the
// sandboxes' IDs, the Report and the supervisor.
func sweepAfterSnapshots(t *testing.T, args ...string) (*fakeagentenv.Server, []string, *drain.Report, *supervisor) {
	t.Helper()
	const n = 12
	srv, ids := agentenvDouble(t, n, fakeagentenv.Config{PauseBase: time.Second})
	var ends []func()
	for _, id := range ids {
		end, err := srv.Snapshot(id)
		require.NoError(t, err)
		ends = append(ends, end)
	}
	var sup *supervisor
	rep := drainBeforeSIGTERM(t, &http.Client{Transport: handlerTransport{srv.Handler()}}, hooks{
		made: func(s *supervisor) { sup = s },
		preStop: func() {
			for _, end := range ends {
				time.AfterFunc(400*time.Millisecond, end) // SIGTERM comes 300 ms after the answer
			}
		},
	}, append([]string{"-grace", "60s"}, args...)...)
	require.NotNil(t, rep.PreStop)
	require.Equal(t, n, rep.PreStop.Running, "the wait counted the ones being snapshotted")
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, n)
	return srv, ids, rep, sup
}
