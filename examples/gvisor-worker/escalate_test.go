//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// A sandbox that cannot be checkpointed (here: its image directory cannot be created) is
// not left running until SIGKILL: after the preserve phase the escalate step SIGTERMs it
// (an actor saves itself on it), and the worker reports it not preserved.
func TestSandboxThatCannotBeCheckpointedIsSignalled(t *testing.T) {
	cfg := runscConfig(t)
	w, c, stop := serveWorker(t, cfg)
	rs := w.rt.(*sandbox.Runsc)

	r, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	bundle := rs.Bundle(r.ID)
	require.Eventually(t, func() bool { n, err := bundle.Counter(); return err == nil && n > 2 },
		time.Minute, 20*time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.StateDir, "runsc", "images"), nil, 0o600)) // checkpoints fail

	rep := stop() // SIGTERM
	require.Error(t, rep.Err(), "the sandbox was lost")
	assert.Equal(t, 1, rep.Preserve.Counts[pause.Failed]+rep.Preserve.Counts[pause.TimedOut])
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	assert.Equal(t, drain.OK, esc.Result, "SIGTERM was enough: %s", esc.Error)
	st, err := rs.Runtime.State(context.Background(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, "stopped", st.Status, "the signalled container exited")
	assert.Positive(t, rep.Headroom)
}

// panicking is a sandbox whose checkpoint panics, as a bug in a runtime's would.
type panicking struct{ pause.Sandbox }

func (panicking) Preserve(context.Context) error { panic("checkpoint: injected") }

// Fault (row 780, a review of row 760): held.Preserve marked its sandbox's checkpoint over
// only once Preserve returned, so a checkpoint that panicked (pause recovers it: a failed
// entry in the Report) left it marked in flight for good. The escalate step took the
// sandbox for one still checkpointing, waited for that checkpoint's end to its deadline,
// and said it outlived the step, unsignalled: the actor never got its SIGTERM. Now a
// panicking checkpoint ends as one that failed.
func TestSandboxWhoseCheckpointPanickedIsSignalled(t *testing.T) {
	w, _, _, d, ids := slowWorker(t, runscConfig(t), 1)
	sbs, err := w.running(context.Background())
	require.NoError(t, err)
	require.Len(t, sbs, 1)
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		return []pause.Sandbox{held{Sandbox: panicking{sbs[0].(held).Sandbox}, w: w}}, nil
	}), pause.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	pr := p.Run(ctx, time.Now().Add(time.Second))
	require.Len(t, pr.Entries, 1)
	require.Contains(t, pr.Entries[0].Error, "panicked")

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	assert.NoError(t, w.escalate(ctx), "the step took the checkpoint that panicked for one in flight")
	assert.Contains(t, d.calls(start), "kill "+ids[0]+" 15", "the sandbox got no SIGTERM")
}

// Fault (row 972): the escalate step's error for a sandbox that did not exit on its
// SIGTERM and needed SIGKILL read "ID: exited_after_kill: %!w(<nil>)", for Stop returns
// no error with ExitedAfterKill when the sandbox only did not exit in time: the Report,
// the termination message and the log said nothing of what happened. It now says that
// the sandbox needed SIGKILL and that its state may not be saved (escalate.ErrKilled).
func TestSandboxThatNeededSIGKILLIsNamedSayingSo(t *testing.T) {
	w, _, _, d, ids := slowWorker(t, runscConfig(t), 1)
	d.mark("deafterm", ids[0], "") // its SIGTERM never reaches it: only SIGKILL ends it

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // 1 s each wait
	defer cancel()
	start := time.Now()
	err := w.escalate(ctx)
	assert.Equal(t, []string{"kill " + ids[0] + " 15", "kill " + ids[0] + " 18", "kill " + ids[0] + " 9"}, d.calls(start),
		"SIGTERM, its SIGCONT, SIGKILL")
	require.Error(t, err, "the sandbox needed SIGKILL")
	assert.Equal(t, ids[0]+": exited_after_kill: "+escalate.ErrKilled.Error(), err.Error())
	assert.ErrorIs(t, err, escalate.ErrKilled)
}

// Fault (row 970, the worker's part): once escalate.Policy sent a SIGKILL due as its
// context ended under a context of its own, given a second past that end, the
// escalate step waited for that send: a step whose context a budget that moved SIGKILL
// earlier ended during the wait after SIGTERM outlived its deadline by the send's time
// (a runsc process, 0.2-0.6 s under load), and the drain abandons a step 100 ms past its
// deadline, its error naming no sandbox. The step now returns at its context's end,
// naming the sandbox whose SIGKILL is being sent, and the send goes on.
func TestEscalateStepEndsAtItsContextWhileALateSIGKILLIsSent(t *testing.T) {
	w, _, _, d, ids := slowWorker(t, runscConfig(t), 1)
	id := ids[0]
	d.mark("deafterm", id, "") // only SIGKILL ends it
	d.mark("holdkill", id, "") // its SIGKILL's runsc kill waits until the test lets it go
	hold := filepath.Join(d.dir, "holdkill-"+id)
	t.Cleanup(func() { _ = os.Remove(hold) })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var cancelled atomic.Int64
	go func() { // the budget moves SIGKILL to now once the SIGTERM went out
		defer func() { cancelled.Store(time.Now().UnixNano()); cancel() }()
		for ctx.Err() == nil {
			if calls, _ := os.ReadFile(filepath.Join(d.dir, "calls")); strings.Contains(string(calls), "kill "+id+" 15") {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	err := w.escalate(ctx)
	t.Logf("the step returned %v after its context's end", time.Since(time.Unix(0, cancelled.Load())))
	var pid []byte
	require.Eventually(t, func() bool {
		pid, _ = os.ReadFile(filepath.Join(d.dir, "killing-"+id))
		return len(pid) > 0
	}, 10*time.Second, 10*time.Millisecond, "no SIGKILL was sent")
	n, perr := strconv.Atoi(strings.TrimSpace(string(pid)))
	require.NoError(t, perr)
	assert.NoError(t, syscall.Kill(n, 0), "the step waited for the SIGKILL's send, until its context cut it")
	require.Error(t, err)
	assert.Equal(t, id+": unknown: "+errKillAtStepEnd.Error()+" (context canceled)", err.Error())

	require.NoError(t, os.Remove(hold))
	stopped := func() bool { gone, _ := w.rt.(*sandbox.Runsc).Runtime.Exited(context.Background(), id); return gone }
	assert.Eventually(t, stopped, 20*time.Second, 50*time.Millisecond, "the SIGKILL sent after the step reached the sandbox")
}
