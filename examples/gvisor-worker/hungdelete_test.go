//go:build linux

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault (a review of row 3260): once its drain was over, the worker closed its sandbox
// node, whose Close waits for the timeouts in progress, each a delete (`runsc delete
// -force`, 30 s at most), with no bound of the budget's: a runsc delete that hangs (a
// sandbox process stuck in the kernel, a hung images volume) held the worker's exit past
// the kubelet's SIGKILL, exit status 137, nothing saying what it waited for. That wait now
// ends 250 ms before SIGKILL, as the one for the checkpoints the drain abandoned does:
// exit status 1, and the termination message names the sandbox whose delete still runs.
//
//	0          Run, timeout 2 s
//	+2 s       its timeout: runsc delete -force hangs
//	then       SIGTERM: nothing to checkpoint; the Report written
//	+8 s       SIGKILL due (no one sends it here)
//	           before: the worker exits once the delete's 30 s are over, past SIGKILL;
//	           after: just before SIGKILL, naming the sandbox
func TestWorkerHeldByAHungDeleteEndsBeforeSIGKILLNamingIt(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	cfg.TerminationLog = filepath.Join(t.TempDir(), "termination-log")
	var logs logbuf.Buffer
	w, err := newWorker(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	d := runscDir{t: t, dir: t.TempDir()}
	rs := w.rt.(*sandbox.Runsc)
	rs.Runtime.Binary = slowRunsc(t, d.dir)
	t.Cleanup(func() { _ = rs.Runtime.DeleteAll(context.Background()) })
	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	served := make(chan error, 1)
	var rep *drain.Report
	go func() {
		var err error
		rep, err = w.serve(ctx)
		served <- err
	}()
	c := dial(t, cfg.Socket)

	r, err := c.Run(context.Background(), &RunRequest{TimeoutS: 2})
	require.NoError(t, err)
	d.mark("holddelete", r.ID, "")
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "holddelete-"+r.ID)) })
	require.Eventually(t, func() bool {
		return slices.Contains(w.node.List(), sandbox.Info{ID: r.ID, State: sandbox.Deleting, TimeoutS: 2})
	}, 30*time.Second, 10*time.Millisecond, "the sandbox's timeout did not begin its delete")
	sigterm()
	awaitReport(t, w)
	kill := w.drainer.Budget().Kill()

	select {
	case err = <-served:
	case <-time.After(time.Until(kill.Add(30 * time.Second))):
		t.Fatalf("the worker still closes 30 s past SIGKILL, for the delete of %s: %s", r.ID, &logs)
	}
	returned := time.Now()
	t.Logf("ended %v before SIGKILL: %v", kill.Sub(returned).Round(time.Millisecond), err)
	assert.True(t, returned.Before(kill), "the worker waited past SIGKILL, which ends it with 137")
	require.Error(t, err, "exit status 0 with a delete left running")
	assert.Contains(t, err.Error(), r.ID, "serve's error does not name the sandbox whose delete still runs")
	msg, rerr := os.ReadFile(cfg.TerminationLog)
	require.NoError(t, rerr)
	t.Logf("termination message:\n%s", msg)
	assert.Contains(t, string(msg), "runsc delete", "the termination message does not say a delete still ran")
	assert.Contains(t, string(msg), r.ID, "the termination message does not name the sandbox")
	assertFirstLineSaysTheWorkerExitsAfterTheDrain(t, string(msg), rep)
}
