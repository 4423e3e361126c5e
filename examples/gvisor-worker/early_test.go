//go:build linux

package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/pause"
)

// slowRunsc writes, in dir, a runsc that runs the real one but sleeps before the
// checkpoint of a container ID with a file dir/slow-ID (the seconds in it); then it holds it
// while a file dir/hold-ID exists; then it fails it if a file dir/fail-ID exists, or
// once, removing it and dir/slow-ID, if a file dir/once-ID does, or with runsc's words
// for a call the sandbox closed unread (connection reset) if a file dir/reset-ID does; once
// a checkpoint of a container with a file dir/staysrunning-ID has succeeded, its state says
// running while that file exists (its stop not seen: a sandbox process slow to end, a
// runsc state slow under load); it sends no signal to a
// container with a file dir/deaf-ID (a kill that does not reach it), and no SIGTERM to one
// with a file dir/deafterm-ID (an actor that does not exit on it); it ends a checkpoint of
// a container with a file dir/aftersignal-ID, done, only once it has sent a signal to each
// container the file names (IDs, one a line); it holds a SIGKILL to a
// container while a file dir/holdkill-ID exists (a kill slow on a loaded node), its PID in
// dir/killing-ID; it holds a delete of a container while a file dir/holddelete-ID exists
// (a runsc delete that hangs); and it
// appends to dir/calls a line for every kill it sends and every checkpoint that ended:
// "kill ID SIGNAL", "checkpointed ID"; and to dir/times each of them with its time, and
// when each checkpoint's real runsc began ("checkpoint ID begins"), for the test's log.
func slowRunsc(t *testing.T, dir string) string {
	t.Helper()
	real, err := exec.LookPath("runsc")
	require.NoError(t, err)
	path := filepath.Join(dir, "runsc")
	require.NoError(t, os.WriteFile(path, []byte(`#!/bin/sh
d=`+dir+`
for a; do prev=$last; last=$a; done
case " $* " in
*" checkpoint "*)
	[ -e $d/slow-$last ] && sleep $(cat $d/slow-$last)
	while [ -e $d/hold-$last ]; do sleep 0.05; done
	[ -e $d/fail-$last ] && { echo "checkpoint failed: injected" >&2; exit 128; }
	[ -e $d/reset-$last ] && { echo "checkpoint failed: checkpointing container \"$last\": urpc method \"containerManager.Checkpoint\" failed: connection reset by peer" >&2; exit 128; }
	[ -e $d/once-$last ] && { rm -f $d/once-$last $d/slow-$last; echo "checkpoint failed: injected once" >&2; exit 128; }
	echo "$(date +%s.%N) checkpoint $last begins" >> $d/times
	`+real+` "$@"; rc=$?
	[ -e $d/aftersignal-$last ] && for k in $(cat $d/aftersignal-$last); do while [ -d $d ] && ! grep -q "^kill $k " $d/calls 2>/dev/null; do sleep 0.02; done; done
	echo "checkpointed $last" >> $d/calls; echo "$(date +%s.%N) checkpointed $last" >> $d/times
	[ $rc = 0 ] && [ -e $d/staysrunning-$last ] && touch $d/unseen-$last
	exit $rc ;;
*" state "*)
	[ -e $d/unseen-$last ] && [ -e $d/staysrunning-$last ] && { printf '{"id":"%s","status":"running","pid":1,"bundle":"/b"}' $last; exit 0; } ;;
*" delete "*)
	while [ -e $d/holddelete-$last ]; do sleep 0.05; done ;;
*" kill "*)
	echo "kill $prev $last" >> $d/calls; echo "$(date +%s.%N) kill $prev $last" >> $d/times
	[ -e $d/deaf-$prev ] && exit 0
	[ -e $d/deafterm-$prev ] && [ "$last" = 15 ] && exit 0
	[ "$last" = 9 ] && echo $$ > $d/killing-$prev && while [ -e $d/holdkill-$prev ]; do sleep 0.02; done ;;
esac
exec `+real+` "$@"
`), 0o755))
	return path
}

// runscDir is the directory of a slowRunsc: the files that make its calls slow, fail,
// hold or not reach a container, and its logs of them.
type runscDir struct {
	t   *testing.T
	dir string
}

// slowWorker serves a worker of cfg on real runsc through a slowRunsc, as serveWorkerWith
// does, with n sandboxes running; it returns their IDs sorted, the order in which the
// Preserver takes them, and the slowRunsc's directory.
func slowWorker(t *testing.T, cfg config, n int) (w *Worker, c *Client, stop func() *drain.Report, d runscDir, ids []string) {
	t.Helper()
	d = runscDir{t: t, dir: t.TempDir()}
	w, c, stop = serveWorkerWith(t, cfg, slog.New(slog.DiscardHandler), func(w *Worker) {
		w.rt.(*sandbox.Runsc).Runtime.Binary = slowRunsc(t, d.dir)
	})
	for range n {
		r, err := c.Run(context.Background(), &RunRequest{})
		require.NoError(t, err)
		waitCount(t, w.rt.(*sandbox.Runsc).Bundle(r.ID), 2)
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return w, c, stop, d, ids
}

// earlyGrace is the grace of the drains here. The budget's margin (1.5 s), the escalate
// step's reserve (1.5 s) and the grpc step's (0.5 s) are at their floors at any grace up to
// 15 s: past the preserve phase's deadline, at earlyLead, the escalate step ends 1.5 s on
// and the Preserver's hard deadline is 2 s on at any such grace. The grace sets only the
// wait before it, which these tests spend waiting (at 12 s, 8.5 s of each).
const earlyGrace = 8 * time.Second

// earlyLead is the preserve phase's deadline of a drain at earlyGrace, from its start.
const earlyLead = earlyGrace - 3500*time.Millisecond

// sleepPast is slowRunsc's sleep ("slow": its seconds) that makes a checkpoint begun as
// the drain at earlyGrace starts go on to d past the preserve phase's deadline (then
// runsc's own time).
func sleepPast(d time.Duration) string {
	return strconv.FormatFloat((earlyLead + d).Seconds(), 'f', 3, 64)
}

// drainingOne starts, as SIGTERM would, the drain of a worker on real runsc with grace
// earlyGrace (preserve deadline at earlyLead, +4.5 s, hard +6.5 s), one checkpoint at a
// time, and one sandbox, id, whose checkpoints marks makes slow, hold or fail
// (runscDir.mark: a name, its content). It returns once the first checkpoint began, with the preserve phase's
// deadline then, first; ended gives the drain's Report.
func drainingOne(t *testing.T, marks map[string]string) (w *Worker, d runscDir, id string, first time.Time, ended <-chan *drain.Report) {
	t.Helper()
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	cfg.Concurrency = 1
	w, _, stop, d, ids := slowWorker(t, cfg, 1)
	id = ids[0]
	for name, content := range marks {
		d.mark(name, id, content)
	}
	rep := make(chan *drain.Report, 1)
	go func() { rep <- stop() }()
	require.Eventually(t, func() bool { return len(w.stops.inFlight()) > 0 }, 10*time.Second, 10*time.Millisecond, "no checkpoint began")
	first = w.drainer.Plan().Deadline(drain.PhasePreserve)
	require.Equal(t, earlyLead, first.Sub(w.drainer.Budget().Start()).Round(time.Millisecond), "the plan's preserve deadline is not earlyLead")
	return w, d, id, first, rep
}

// callIndex returns where in lines, slowRunsc's calls, call is; the test fails when it
// is not there.
func callIndex(t *testing.T, lines []string, call string) int {
	t.Helper()
	i := slices.Index(lines, call)
	require.GreaterOrEqual(t, i, 0, "no runsc call %q", call)
	return i
}

// preservePhase logs the preserve phase of rep, whose first deadline was first, and
// returns it.
func preservePhase(t *testing.T, rep *drain.Report, first time.Time) *drain.PhaseReport {
	t.Helper()
	pre := rep.Phase(drain.PhasePreserve)
	require.NotNil(t, pre)
	t.Logf("preserve phase: %s, first deadline +%v, last +%v; %v", pre.Result, first.Sub(rep.Start).Round(time.Millisecond),
		pre.Deadline.Sub(rep.Start).Round(time.Millisecond), pre.Error)
	return pre
}

// preservedUnsignalled asserts that rep, a drain of the one sandbox id whose preserve
// phase's first deadline was first, checkpointed it and sent it no SIGTERM (signalled
// says what such a one means), and that the phase ended OK with it preserved.
func (d runscDir) preservedUnsignalled(rep *drain.Report, id string, first time.Time, signalled string) {
	t := d.t
	t.Helper()
	lines := d.calls(rep.Start)
	pre := preservePhase(t, rep, first)
	assert.NotContains(t, lines, "kill "+id+" 15", signalled)
	assert.Contains(t, lines, "checkpointed "+id)
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	assert.Equal(t, pause.Preserved, rep.Preserve.Entries[0].Outcome, rep.Preserve.Entries[0].Error)
	assert.Equal(t, drain.OK, pre.Result, pre.Error)
}

// drainHeldCheckpoint starts the drain of a worker of cfg's with one sandbox whose
// checkpoint is held (slowRunsc's hold mark, removed at the test's end), as SIGTERM
// would, and waits for the drain's Report to be written: the checkpoint abandoned at the
// hard deadline, the worker still holding its state directory for it. ended receives
// what stop returns; removing the mark (d.release) lets the checkpoint end.
func drainHeldCheckpoint(t *testing.T, cfg config) (w *Worker, d runscDir, id string, ended <-chan *drain.Report) {
	t.Helper()
	w, _, stop, d, ids := slowWorker(t, cfg, 1)
	id = ids[0]
	d.mark("hold", id, "")
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	reports := make(chan *drain.Report, 1)
	go func() { reports <- stop() }() // as SIGTERM would
	awaitReport(t, w)
	return w, d, id, reports
}

// release removes the mark name-id: a call mark held goes on.
func (d runscDir) release(name, id string) {
	d.t.Helper()
	require.NoError(d.t, os.Remove(filepath.Join(d.dir, name+"-"+id)))
}

// mark writes the file name-id holding content, which makes slowRunsc's calls on
// sandbox id slow ("slow", "aftersignal"), hold ("hold"), fail ("fail", "once"; after a
// hold, once it is removed) or not reach it ("deaf").
func (d runscDir) mark(name, id, content string) {
	d.t.Helper()
	require.NoError(d.t, os.WriteFile(filepath.Join(d.dir, name+"-"+id), []byte(content), 0o600))
}

// when returns when slowRunsc logged call ("checkpointed ID", "kill ID SIGNAL") first,
// and whether it did.
func (d runscDir) when(call string) (time.Time, bool) {
	d.t.Helper()
	times, err := os.ReadFile(filepath.Join(d.dir, "times"))
	require.NoError(d.t, err)
	for _, line := range strings.Split(string(times), "\n") {
		at, logged, ok := strings.Cut(line, " ")
		if !ok || logged != call {
			continue
		}
		secs, err := strconv.ParseFloat(at, 64)
		require.NoError(d.t, err, line)
		return time.Unix(0, int64(secs*1e9)), true
	}
	return time.Time{}, false
}

// calls logs the calls slowRunsc made, with their times and start's, and returns them,
// one a line: "kill ID SIGNAL", "checkpointed ID"; none when it made none.
func (d runscDir) calls(start time.Time) []string {
	d.t.Helper()
	times, _ := os.ReadFile(filepath.Join(d.dir, "times"))
	d.t.Logf("start %.3f; runsc calls:\n%s", float64(start.UnixNano())/1e9, times)
	data, err := os.ReadFile(filepath.Join(d.dir, "calls"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(d.t, err)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// Fault (a review of the escalate step against runsc): the sandboxes the preserve phase
// could not checkpoint were signalled only once the Preserver returned, that is once every
// checkpoint still in flight at the phase deadline had ended, though none of them was one
// of those sandboxes. A checkpoint that ran on past the deadline (runsc slow, a large
// sandbox started just before it) spent the escalate step's reserve: the actor got its
// SIGTERM only after that checkpoint, with what little of the step was left before SIGKILL.
// Now each sandbox no checkpoint holds gets its SIGTERM at the preserve phase's deadline,
// while the others' checkpoints finish.
//
// Fault (row 760, CI at dede49a): a sandbox whose checkpoint was in flight at the preserve
// phase's deadline (a retry of a failed one, begun just before) was passed over then, and
// when that checkpoint failed, nothing signalled it until the escalate step, after the
// other sandbox's slow checkpoint. Now the end of a checkpoint that failed after the
// deadline signals its sandbox at once.
//
// Row 1075: the test asserted the order of the late SIGTERM and the end of a checkpoint
// slept to 0.8 s past the deadline, and failed at load 10 with the behaviour right: the
// late SIGTERM follows the first one's runsc (the late checkpoint failed once it was
// sent), the failed checkpoint and runsc's state of its sandbox, and came 0.56 s after the
// first, just after that checkpoint ended. Now the late checkpoint fails once the
// escalation begun at the deadline waits for it (row 760's case, seen in the worker), and
// the slow checkpoint ends only once the other two are signalled: a signal that waited
// for it (either fault) would come only from the escalate step, once the Preserver had
// given the checkpoint up at its hard deadline, and the slow sandbox would be timed out,
// not preserved. Whether SIGTERM was enough, or the time for it had passed, is the
// machine's speed, which the test does not assert.
//
// It still asserted one: that the slow checkpoint was preserved, which needs the
// worker's own work after runsc answers (the image read, the fsyncs, the record) done
// before the hard deadline, in what the late SIGTERM leaves of the 2 s after the
// preserve deadline. Under -race the image read alone took 0.2 s unloaded and 0.66-1.42
// s at load 18-27; 4 of 24 runs failed at load 4-27 (2 of 12 at load 4-16), the slow sandbox
// given up at the hard deadline with its runsc ended 1.07-1.46 s before it. A signal
// that waited for it is now told by its runsc's end, after the hard deadline or not
// before the drain's; its outcome is asserted for what it is: preserved, or given up and
// named by the escalate step as in flight, never signalled.
func TestSandboxesNotCheckpointedAreSignalledAtThePreserveDeadline(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace // preserve deadline at +4.5 s, escalate to +6 s, hard +6.5 s
	cfg.Concurrency = 3
	w, _, stop, d, ids := slowWorker(t, cfg, 3)
	failing, late, slow := ids[0], ids[1], ids[2]
	d.mark("fail", failing, "") // fails at once, each time the Preserver tries it
	d.mark("hold", late, "")    // in flight at the deadline,
	d.mark("fail", late, "")    // then fails
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+late)) })
	// Its checkpoint starts at once, saves the sandbox, and ends once the other two are
	// signalled, before the hard deadline unless a signal waited for it.
	d.mark("aftersignal", slow, failing+"\n"+late+"\n")

	ended := make(chan *drain.Report, 1)
	go func() { ended <- stop() }() // as SIGTERM would
	require.Eventually(t, func() bool {
		w.stops.mu.Lock()
		defer w.stops.mu.Unlock()
		return len(w.stops.after[late]) > 0
	}, 30*time.Second, 5*time.Millisecond, "no escalation waits for the late checkpoint")
	d.release("hold", late)
	rep := <-ended

	lines := d.calls(rep.Start)
	signalled := func(id string) bool {
		return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "kill "+id+" ") })
	}
	assert.True(t, signalled(failing), "the sandbox whose checkpoints failed was not signalled")
	assert.True(t, signalled(late), "the sandbox whose checkpoint failed past the deadline was not signalled")
	assert.False(t, signalled(slow), "the checkpointed sandbox was signalled")
	require.NotNil(t, rep.Preserve)
	outcomes := map[string]pause.Outcome{}
	for _, e := range rep.Preserve.Entries {
		t.Logf("%s: %s %s", e.ID, e.Outcome, e.Error)
		outcomes[e.ID] = e.Outcome
	}
	pre := rep.Phase(drain.PhasePreserve)
	require.NotNil(t, pre)
	// Its runsc ends once the other two are signalled: before the Preserver's hard
	// deadline, unless a signal waited for it (either fault), which the escalate step
	// alone would then send, once the Preserver had given it up.
	require.False(t, pre.Hard.IsZero(), "the Report has no hard deadline for the preserve phase")
	checkpointed, ok := d.when("checkpointed " + slow)
	require.True(t, ok, "the slow checkpoint's runsc had not ended when the drain did: a signal waited for it")
	assert.True(t, checkpointed.Before(pre.Hard), "the slow checkpoint's runsc ended at +%v, not before the hard deadline (+%v): a signal waited for it",
		checkpointed.Sub(rep.Start).Round(time.Millisecond), pre.Hard.Sub(rep.Start).Round(time.Millisecond))
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	// From the budget's start, which the plan counts from: the Report's comes a moment
	// later (2 ms at load 16).
	assert.Equal(t, earlyLead, pre.Deadline.Sub(w.drainer.Budget().Start()).Round(time.Millisecond), "the plan's preserve deadline is not earlyLead")
	t.Logf("preserve deadline +%v, hard +%v, escalate step +%v to +%v (%v of its %v reserve), ended +%v: %s %v",
		pre.Deadline.Sub(rep.Start).Round(time.Millisecond), pre.Hard.Sub(rep.Start).Round(time.Millisecond), esc.Start.Sub(rep.Start).Round(time.Millisecond),
		esc.Deadline.Sub(rep.Start).Round(time.Millisecond), esc.Deadline.Sub(esc.Start).Round(time.Millisecond), esc.Reserve,
		esc.End.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	for _, id := range []string{failing, late} {
		assert.NotContains(t, esc.Error, id+": its checkpoint was still in flight", "the step left %s unsignalled", id)
	}
	// What the worker does once runsc has answered (the image read for a workload that
	// runs, the fsyncs, the record: 0.2 s unloaded, 1.4 s at load 23 under -race) is the
	// machine's speed: past the hard deadline the Preserver gave it up, and the escalate
	// step named it in flight, never signalled.
	switch outcomes[slow] {
	case pause.Preserved:
		assert.NotContains(t, esc.Error, slow, "the escalate step named the preserved sandbox")
	case pause.TimedOut:
		t.Logf("%s: its runsc ended %v before the hard deadline; the worker's work after it did not", slow, pre.Hard.Sub(checkpointed).Round(time.Millisecond))
		assert.Contains(t, esc.Error, slow+": its checkpoint was still in flight", "the escalate step did not name the checkpoint it gave up")
	default:
		t.Errorf("the slow checkpoint, which ends once the others are signalled, ended %s", outcomes[slow])
	}
}

// Fault (a review of row 413 against row 239's restarted kubelet): a budget that moved
// SIGKILL later during the preserve phase (the kubelet ran the termination over) makes the
// phase run the Preserver again until the new deadline; the first Run's context still ends
// at the old one. The escalations begun then SIGTERMed every sandbox not yet checkpointed,
// and the second Run, which would have checkpointed them, found them signalled: lost.
// Here three sandboxes are checkpointed one at a time, the first held in its checkpoint
// past the old deadline; the kubelet's hook call comes before it.
func TestSandboxesAreNotSignalledWhenTheBudgetMovedSIGKILLLater(t *testing.T) {
	cfg := runscConfig(t)
	// Not earlyGrace: the hook call moves SIGKILL later by the time since SIGTERM, so the
	// wait before the deadline is what the second Run gets for the three checkpoints, one
	// at a time: some 3.3 s each at load 20 under -race (runsc's start, its save, the
	// worker's reads, fsyncs and record), where a grace of 12 s gave them 6 s.
	cfg.Grace = 20 * time.Second // preserve deadline at +16 s
	cfg.Concurrency = 1
	w, _, stop, d, ids := slowWorker(t, cfg, 3)
	for _, id := range ids {
		d.mark("hold", id, "")
	}

	ended := make(chan *drain.Report, 1)
	go func() { ended <- stop() }() // as SIGTERM would
	var held string
	require.Eventually(t, func() bool {
		w.stops.mu.Lock()
		defer w.stops.mu.Unlock()
		for id := range w.stops.checkpointing {
			held = id
		}
		return held != ""
	}, 10*time.Second, 10*time.Millisecond, "no checkpoint began")
	first := w.drainer.Plan().Deadline(drain.PhasePreserve)
	// The restarted kubelet's hook call, 2 s before the deadline: SIGKILL moves about
	// 14 s later. Then the held checkpoint ends just past the old deadline, well before
	// the hard deadline, and the others are free to run.
	time.Sleep(time.Until(first.Add(-2 * time.Second)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), cfg.Grace), "SIGKILL did not move")
	time.Sleep(time.Until(first.Add(300 * time.Millisecond)))
	for _, id := range ids {
		d.release("hold", id)
	}
	rep := <-ended

	lines := d.calls(rep.Start)
	pre := preservePhase(t, rep, first)
	assert.True(t, pre.Deadline.After(first), "the phase did not run again until the new deadline")
	for _, l := range lines {
		assert.False(t, strings.HasPrefix(l, "kill "), "a sandbox the second Run was to checkpoint was signalled: %s", l)
	}
	require.NotNil(t, rep.Preserve)
	outcomes := map[string]pause.Outcome{}
	for _, e := range rep.Preserve.Entries {
		outcomes[e.ID] = e.Outcome
		// The held checkpoint, released 0.3 s past the old deadline, may run past the
		// first Run's hard deadline on a loaded node (2.7 s after its release at load 20,
		// 1.7 s before that deadline): that Run gave it up, running on, and the second
		// found the sandbox pausing, then paused by it: preserved all the same, late
		// (row 3420), where the Report said vanished.
		assert.Equal(t, pause.Preserved, e.Outcome, "%s: %s", e.ID, e.Error)
	}
	for _, id := range ids {
		assert.Contains(t, lines, "checkpointed "+id)
		assert.Equal(t, pause.Preserved, outcomes[id], id)
	}
	for _, info := range w.node.List() {
		assert.Equal(t, sandbox.Paused, info.State, "%s is not paused and recorded", info.ID)
	}
	assert.Equal(t, drain.OK, pre.Result, pre.Error)
}

// Fault (row 761, a review of row 760): the escalate step passed over a sandbox whose
// checkpoint was in flight, and when that checkpoint outlived the step (runsc hung past
// the Preserver's hard deadline, abandoned), the step said OK: the sandbox was left
// unsignalled and the step's result did not say so. The step now waits for that
// checkpoint's end, to signal the sandbox if it failed, but never past its deadline,
// where it gives up with an error naming the sandbox.
func TestCheckpointThatOutlivesTheEscalateStepIsNamedNotWaitedFor(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace
	// The worker holds its state directory until the checkpoint ends (row 3221): it ends
	// once the drain is over.
	_, d, id, ended := drainHeldCheckpoint(t, cfg)
	d.release("hold", id)
	rep := <-ended
	d.calls(rep.Start)
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("escalate step +%v to +%v, ended +%v: %s %v", esc.Start.Sub(rep.Start).Round(time.Millisecond),
		esc.Deadline.Sub(rep.Start).Round(time.Millisecond), esc.End.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	assert.Equal(t, drain.TimedOut, esc.Result)
	assert.Contains(t, esc.Error, id+": "+errCheckpointOutlived.Error())
}

// Fault (row 781, a review of row 760): a checkpoint in flight at the preserve phase's
// deadline left, at its end, the escalation of its sandbox to a callback, which signalled
// the sandbox if the checkpoint had failed, whatever the budget had done since. A budget
// that moved SIGKILL later in between (the kubelet ran the termination over) makes the
// phase run the Preserver again, to checkpoint that sandbox; the callback's SIGTERM lost
// it. The escalations are not begun at the deadline when the budget has moved SIGKILL
// later (TestSandboxesAreNotSignalledWhenTheBudgetMovedSIGKILLLater); the callback now
// looks again when it runs. Here the one sandbox's checkpoint fails once, 1 s past the
// deadline, 0.7 s after the kubelet's hook call; its retry would succeed.
func TestCheckpointThatFailsAfterTheBudgetMovedSIGKILLLaterIsRetriedNotSignalled(t *testing.T) {
	w, d, id, first, ended := drainingOne(t, map[string]string{"slow": sleepPast(time.Second), "once": ""})
	// Past the deadline, where the escalations began, before the checkpoint fails.
	time.Sleep(time.Until(first.Add(300 * time.Millisecond)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), w.cfg.Grace), "SIGKILL did not move")
	rep := <-ended

	d.preservedUnsignalled(rep, id, first, "the sandbox the second Run was to checkpoint was signalled")
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	assert.Equal(t, drain.OK, esc.Result, esc.Error)
}

// Fault (row 830, a review of row 781): stops marked a sandbox's checkpoint in flight
// with a yes/no flag, which the end of any checkpoint of it cleared. A checkpoint the
// Preserver abandoned at its hard deadline (runsc's checkpoint runs on whatever its
// context: sandbox.Runsc.Pause) is still in flight when the preserve phase runs the
// Preserver again (a budget that moved SIGKILL later), whose Run checkpoints the sandbox
// again once the first has ended. When the first one failed after the second Run's
// deadline, its end cleared the flag and called the escalation begun at that deadline,
// which signalled the sandbox as the second Run's checkpoint of it began: SIGTERM in the
// middle of a checkpoint. Now each checkpoint is counted, and what waits for their end is
// called when the last one ends. Here the first checkpoint is held past the first Run's
// hard deadline, the kubelet's hook call comes before its deadline, and the held one
// fails once the escalation at the second Run's deadline waits for it; the second Run's
// checkpoint then succeeds.
//
// Row 1154: the test asserted the machine's speed, that the second Run's checkpoint ended
// within that Run, whose hard deadline is 0.82 s past its deadline, not 2 s: the abandoned
// checkpoint's 6.5 s, observed by the Estimator (row 1072), makes the preserve phase's
// reserve 6.5 s, which with the escalate and grpc steps' does not fit the 3.5 s left, and
// the plan shares the time in proportion (escalate 0.62 s, grpc 0.21 s). In that 0.82 s
// the held checkpoint must fail (slowRunsc polls its hold) and the next begin and end:
// 0.2–0.3 s of runsc unloaded, past the hard deadline beside 4 busy loops (5 of 11 runs:
// the Preserver gave it up, timed out, and it preserved the sandbox 0.03–0.4 s later).
// Now the test asserts what row 830 is about: the sandbox is never signalled (no SIGTERM
// nor SIGKILL), the second checkpoint ends and leaves it paused, and the Report says
// preserved, or timed out with that checkpoint left running; the phase is OK only with it
// preserved.
func TestCheckpointOfTheNextRunIsNotSignalledWhenTheAbandonedOneFails(t *testing.T) {
	w, d, id, first, ended := drainingOne(t, map[string]string{"hold": "", "once": ""})
	t.Cleanup(func() { os.Remove(filepath.Join(d.dir, "hold-"+id)) })
	// Before the deadline: no escalation begins at it, and the phase runs the
	// Preserver again once the first Run has abandoned the held checkpoint.
	time.Sleep(time.Until(first.Add(-time.Second)))
	require.True(t, w.drainer.Budget().OnRestart(time.Now(), w.cfg.Grace), "SIGKILL did not move")
	awaited := func() bool {
		w.stops.mu.Lock()
		defer w.stops.mu.Unlock()
		return len(w.stops.after[id]) > 0
	}
	require.Eventually(t, awaited, 20*time.Second, 10*time.Millisecond, "no escalation waited for the checkpoint in flight")
	t.Logf("the escalation at the second Run's deadline waits for the checkpoint; it fails at +%v",
		time.Since(w.drainer.Budget().Start()).Round(time.Millisecond))
	d.release("hold", id)
	rep := <-ended

	// The second Run's checkpoint may outlive the Run (the Preserver does not wait for it
	// past the hard deadline): it is seen to end, whenever runsc ends it.
	require.Eventually(t, func() bool { return len(w.stops.inFlight()) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the second Run's checkpoint did not end")
	lines := d.calls(rep.Start)
	pre := preservePhase(t, rep, first)
	assert.Equal(t, []string{"checkpointed " + id}, lines, "the sandbox was signalled while the second Run checkpointed it, or that checkpoint did not end")
	assert.True(t, slices.ContainsFunc(w.node.List(), func(i sandbox.Info) bool { return i.ID == id && i.State == sandbox.Paused }),
		"the second Run's checkpoint did not leave the sandbox paused: %v", w.node.List())
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	entry := rep.Preserve.Entries[0]
	switch entry.Outcome {
	case pause.Preserved:
		assert.Equal(t, drain.OK, pre.Result, pre.Error)
	case pause.TimedOut: // it ended past the second Run's hard deadline: runsc's speed
		assert.Equal(t, drain.Failed, pre.Result, pre.Error)
	default:
		t.Errorf("the sandbox is %s, not preserved nor timed out in a checkpoint: %s", entry.Outcome, entry.Error)
	}
}

// The same, in stops alone: an escalation that finds a sandbox checkpointed twice (a
// checkpoint abandoned by the Preserver, and the next Run's) is called once both have
// ended, and signals it only if neither preserved it, whichever ends first.
func TestEscalationWaitsForTheLastCheckpointInFlight(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		firstFailed, lastFailed bool
		wantFailed              bool
	}{
		{"the abandoned one fails, the next preserves", true, false, false},
		{"the abandoned one preserves, the next finds it paused", false, true, false},
		{"both fail", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s stops
			began, joined := s.checkpoint("sb")
			require.True(t, began)
			require.False(t, joined, "the first checkpoint joins none")
			began, joined = s.checkpoint("sb")
			require.True(t, began)
			require.True(t, joined, "the second does not join the first, in flight")
			var ends []bool
			then := func() func(bool) { return func(failed bool) { ends = append(ends, failed) } }
			require.Equal(t, checkpointing, s.claim("sb", then))
			s.checkpointed("sb", tc.firstFailed)
			assert.Empty(t, ends, "called while a checkpoint of the sandbox was still in flight")
			assert.Equal(t, []string{"sb"}, s.inFlight())
			s.checkpointed("sb", tc.lastFailed)
			assert.Equal(t, []bool{tc.wantFailed}, ends)
			assert.Empty(t, s.inFlight())
			assert.Equal(t, claimed, s.claim("sb", then), "no checkpoint in flight: the escalation signals it")
		})
	}
}

// Fault (row 782, a review of row 760): a client's checkpoint (the Checkpoint RPC, which
// the gate admits during the drain) in flight at the preserve phase's deadline, of a
// sandbox the Preserver had not reached, showed it pausing, and the escalations begun then
// passed it over as not running; when that checkpoint failed, nothing signalled the
// sandbox until the escalate step, after another sandbox's slow checkpoint. Now the end of
// a transition in flight at the deadline signals its sandbox if it ends running. Here one
// checkpoint at a time: the Preserver's of the first sandbox ends about 1.2 s past the
// deadline (its sleep, then runsc's own time), the client's of the second fails about
// 0.2 s past it. Whether the first one's ends by the escalate step's deadline is not this
// test's matter: on a loaded machine it may not, and the step's error names it then.
//
// Row 1155: the test asserted the machine's speed, that SIGTERM was enough (the step's
// error did not name the client's sandbox), where its escalation, begun as the client's
// checkpoint failed, 0.2 s past the deadline and runsc's time, has what is left of the
// step's 1.5 s, halved by escalate.Policy between the wait after SIGTERM and the one after
// SIGKILL (about 0.5 s each): `runsc kill`, the actor's exit and `runsc wait` took longer
// at load 13–21, and the step named it, "SIGKILL being sent as the escalation's context
// ended", with the behaviour right. Now it asserts that the sandbox got SIGTERM before any
// SIGKILL, and that the step does not name it as a transition it outlived, unsignalled.
func TestSandboxWhoseClientCheckpointFailsAfterThePreserveDeadlineIsSignalledThen(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace // preserve deadline at +4.5 s, escalate to +6 s, hard +6.5 s
	cfg.Concurrency = 1
	w, c, stop, d, ids := slowWorker(t, cfg, 2)
	slow, client := ids[0], ids[1] // the Preserver takes slow first
	d.mark("slow", slow, sleepPast(900*time.Millisecond))
	d.mark("slow", client, sleepPast(200*time.Millisecond))
	d.mark("fail", client, "")
	go func() { _, _ = c.Checkpoint(context.Background(), client) }() // it fails
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(w.node.List(), func(i sandbox.Info) bool { return i.ID == client && i.State == sandbox.Pausing })
	}, 10*time.Second, 5*time.Millisecond, "the client's checkpoint did not begin")

	rep := stop() // as SIGTERM would
	// The Preserver's checkpoint may outlive the drain on a loaded machine (it gives it up
	// at its hard deadline): it is seen to end, whenever runsc ends it.
	require.Eventually(t, func() bool { return len(w.stops.inFlight()) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the Preserver's checkpoint did not end")
	lines := d.calls(rep.Start)
	index := func(line string) int { return callIndex(t, lines, line) }
	assert.Less(t, index("kill "+client+" 15"), index("checkpointed "+slow),
		"the sandbox whose client's checkpoint failed past the deadline waited for another's")
	if slices.Contains(lines, "kill "+client+" 9") { // SIGTERM was not enough on this machine
		assert.Less(t, index("kill "+client+" 15"), index("kill "+client+" 9"), "SIGKILL before SIGTERM")
	}
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("escalate step: %s; %s", esc.Result, esc.Error)
	assert.NotContains(t, esc.Error, client+": "+errTransitionOutlived.Error())
}

// Fault (row 783, a review of row 760): the escalations begun at the preserve phase's
// deadline run under the escalate step's window as the plan gave it then, which does not
// follow the budget (deadline.Plan.Context), and the step waited for them all. A budget
// that moved SIGKILL earlier after the deadline (a shorter deletion the drain's poll
// read: kubectl delete --grace-period) ended the step's window, not theirs: the step ran
// on, and the drain abandoned it 0.1 s past its new deadline, its Report saying only that
// it did not return, not which sandbox it could not see end, while the escalation went on
// past the step. Now they end with the step's context. Here the one sandbox's checkpoint
// fails 0.2 s past the deadline, which signals it then, and no kill reaches it; SIGKILL
// moves 1.2 s earlier 0.4 s past the deadline.
func TestEscalateStepEndsWithItsEarlyEscalationsWhenTheBudgetMovesSIGKILLEarlier(t *testing.T) {
	cfg := runscConfig(t)
	cfg.Grace = earlyGrace // preserve deadline at +4.5 s, escalate to +6 s
	cfg.Concurrency = 1
	w, _, stop, d, ids := slowWorker(t, cfg, 1)
	id := ids[0]
	d.mark("slow", id, sleepPast(200*time.Millisecond))
	d.mark("fail", id, "")
	d.mark("deaf", id, "")

	ended := make(chan *drain.Report, 1)
	go func() { ended <- stop() }() // as SIGTERM would
	require.Eventually(t, w.drainer.Budget().Anchored, 10*time.Second, 10*time.Millisecond, "no drain began")
	first := w.drainer.Plan().Deadline(drain.PhasePreserve)
	time.Sleep(time.Until(first.Add(400 * time.Millisecond)))
	budget := w.drainer.Budget()
	require.True(t, budget.Tighten(budget.Kill().Add(-1200*time.Millisecond)), "SIGKILL did not move")
	rep := <-ended

	lines := d.calls(rep.Start)
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("escalate step +%v to +%v, ended +%v: %s %v", esc.Start.Sub(rep.Start).Round(time.Millisecond),
		esc.Deadline.Sub(rep.Start).Round(time.Millisecond), esc.End.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	require.Contains(t, lines, "kill "+id+" 15", "no SIGTERM")
	assert.Equal(t, drain.TimedOut, esc.Result, "the step did not return with its deadline: %s", esc.Error)
	assert.Contains(t, esc.Error, id, "the step's error does not name the sandbox whose end it did not see")
}

// Fault (row 800, a load test of row 761): the escalations begun at the preserve phase's
// deadline wait for a checkpoint in flight under the escalate step's window as the plan
// gave it then, whose end (+10 s at grace 12 s) comes before the Preserver's hard deadline
// (+10.5 s), to which a checkpoint may run. When they gave up on one that then ended
// preserved, they named it in the step's error, "still in flight at the escalate step's
// deadline: not signalled": the step failed with nothing to signal, and under CI's load a
// slow real checkpoint crossed that line in 4 runs of 11. Now only the step, which begins
// once the Preserver has returned, names what outlives it. Here a fake checkpoint
// ends between the two.
func TestCheckpointPreservedPastThePlannedEscalateDeadlineIsNotNamed(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t)
	cfg.Grace = earlyGrace
	cfg.Concurrency = 1
	w, c, stop := serveWorkerWith(t, cfg, slog.New(slog.DiscardHandler), nil)
	_, err := c.Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	// After the plan fitted one round of the configured 1 s: it ends 1.7 s past the preserve
	// deadline, between the escalate step's planned end (1.5 s) and the hard deadline (2 s).
	w.rt.(*sandbox.Fake).PauseLatency = earlyLead + 1700*time.Millisecond

	rep := stop() // as SIGTERM would
	require.NotNil(t, rep.Preserve)
	require.Len(t, rep.Preserve.Entries, 1)
	e := rep.Preserve.Entries[0]
	esc := rep.Phase("escalate")
	require.NotNil(t, esc)
	t.Logf("preserved %s at +%v; escalate step +%v to +%v: %s %s", e.Outcome, e.End.Sub(rep.Start).Round(time.Millisecond),
		esc.Start.Sub(rep.Start).Round(time.Millisecond), esc.Deadline.Sub(rep.Start).Round(time.Millisecond), esc.Result, esc.Error)
	require.Equal(t, pause.Preserved, e.Outcome, "the checkpoint ends before the hard deadline: %s", e.Error)
	assert.Equal(t, drain.OK, esc.Result, "nothing was left to signal: %s", esc.Error)
}
