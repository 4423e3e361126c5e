//go:build linux

package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/runsc"
)

// A client whose Restore call ends (its deadline, a Ctrl-C) once gVisor's sandbox process
// is restoring: killing the `runsc restore` client then left that process (runsc-sandbox
// and its gofer, holding the restored memory) running with no container in runsc's state,
// so neither the worker (the sandbox still "paused") nor `runsc delete` ever stopped it:
// a whole sandbox's memory leaked until the pod ended, per Restore given up. The worker
// now lets a started restore end: the sandbox runs, as the worker says, and is
// checkpointed at the next drain.
func TestRestoreWhoseClientIsGoneLeavesNoSandboxBehind(t *testing.T) {
	w, c, stop := serveWorker(t, runscConfig(t))
	rs := w.rt.(*sandbox.Runsc)
	r := runCheckpointed(t, c, rs)
	bundle := rs.Bundle(r.ID).Dir
	require.Eventually(t, func() bool { return len(runsc.SandboxProcesses(bundle)) == 0 }, time.Minute, 10*time.Millisecond,
		"the checkpointed sandbox's processes exit")
	t.Cleanup(func() { // whatever was left, in this test's name only
		for _, pid := range runsc.SandboxProcesses(bundle) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	})

	// The client gives up once the restore's sandbox process runs.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	restoring := make(chan struct{})
	go func() {
		defer close(restoring)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-tick.C:
			}
			if len(runsc.SandboxProcesses(bundle)) > 0 {
				ccancel()
				return
			}
		}
	}()
	_, err := c.Restore(cctx, r.ID)
	<-restoring
	if err == nil {
		t.Skip("the restore ended before its client gave up: nothing to check this run")
	}
	require.Equal(t, codes.Canceled, status.Code(err), "the client gave up: %v", err)

	// The condition runs in a goroutine of its own, where require's FailNow must not be
	// called: a failed List or a wrong count ends the wait, checked here after it.
	var list *ListReply
	var listErr error
	require.Eventually(t, func() bool {
		list, listErr = c.List(context.Background())
		return listErr != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].State != sandbox.Resuming
	}, time.Minute, 10*time.Millisecond)
	require.NoError(t, listErr)
	require.Len(t, list.Sandboxes, 1)
	state := list.Sandboxes[0].State
	st, serr := rs.Runtime.State(context.Background(), r.ID)
	procs := runsc.SandboxProcesses(bundle)
	if state == sandbox.Paused {
		// Consistent only when nothing of the restore is left (or soon).
		assert.Eventually(t, func() bool { procs = runsc.SandboxProcesses(bundle); return len(procs) == 0 }, 10*time.Second, 10*time.Millisecond,
			"the worker says paused and runsc knows no container (%v), but gVisor's processes run: %v", serr, procs)
		return
	}
	require.Equal(t, sandbox.Running, state)
	require.NoError(t, serr)
	assert.Equal(t, "running", st.Status, "the worker says what runsc says")
	saved, err := rs.Bundle(r.ID).Counter()
	require.NoError(t, err)
	waitCount(t, rs.Bundle(r.ID), saved+1)
	rep := stop()
	require.NoError(t, rep.Err())
	assert.Equal(t, 1, rep.Preserve.Counts["preserved"], "the restored sandbox is checkpointed at the drain")
	counts, err := rs.Bundle(r.ID).Counts()
	require.NoError(t, err)
	assert.True(t, runsc.ConsecutiveFromOne(counts), "the counter went on where it was: %v", counts)
}
