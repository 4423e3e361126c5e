package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// -warm: drainkit's node drains once (a real sandboxd, its first drain: nothing measured,
// the plan counts one pause at a time), and a new sandboxd on the same state directory,
// with the first drain's paused sandboxes loaded and as many new ones running, is
// terminated the same way. The second server's plan starts from the level the first
// learned (its own log says what it loaded): more than one pause at once, so its preStop
// wait runs longer, and both drains preserve every sandbox, the first drain's paused ones
// neither counted nor preserved again.
//
// 24 pauses of 250 ms on a disk that writes 4 at full speed, grace 8 s: one at a time the
// cold plan reserves 24 x 250 ms; the warm one rounds of the learned level at the
// estimate measured at it (about 3 x 0.55 s at level 8 here; 0.78 s, the first drain's
// mix, before row 1005), less unless pauses measured over three times slower than the
// disk makes them.
//
// The first drain learns a level whatever the load: its climb starts 8 at once and
// doubles to 16 at its fourth completion, 3 more having started at 8 by then, and the
// epoch at 16 decides, within the noise or not, by its 12th sample (pause's maxStretch
// times the 4 an epoch needs), which the 24 - 8 - 3 = 13 left give it. With 20 it had 9:
// two busy loops beside the test (load 4-11 on 2 cores), 4 of 50 first drains ended with
// that comparison within the noise and learned no level, as pause documents a Run too
// short to decide (row 1690).
func TestWarmNodePlansWithTheLevelItLearned(t *testing.T) {
	if testing.Short() {
		t.Skip("two real terminations with an 8 s grace period")
	}
	opts, err := parseFlags([]string{"-n", "24", "-pause", "250ms", "-jitter", "0", "-warm"}, io.Discard)
	require.NoError(t, err)
	require.True(t, opts.Warm)
	warm, err := simulateWarm(context.Background(), opts, io.Discard)
	require.NoError(t, err)
	ws := warm.Warm
	require.NotNil(t, ws)
	cold := ws.Before
	var out strings.Builder
	printWarm(&out, ws)
	printTimeline(&out, warm)
	t.Log("\n" + out.String())

	for name, r := range map[string]*result{"first drain": cold, "second drain": warm} {
		assert.Equal(t, opts.N, r.N, name)
		assert.Equal(t, opts.N, r.Preserved, name)
		assert.True(t, r.DaemonClean, name)
		assert.False(t, r.Timeline.Killed, name)
		assert.NoError(t, r.ExitErr, name)
		if assert.NotNil(t, r.Report, name) && assert.NotNil(t, r.Report.Preserve, name) {
			assert.Len(t, r.Report.Preserve.Entries, opts.N, "%s: the running sandboxes alone", name)
			assert.Zero(t, r.Report.Lost(), name)
		}
	}
	assert.Equal(t, opts.N, ws.Paused, "the first drain's sandboxes are loaded paused")
	assert.Equal(t, opts.N, ws.Running)
	assert.NotEqual(t, opts.IDSeed, ws.IDSeed, "the first drain's sandboxes are not the shown ones")

	assert.Greater(t, ws.Level, 1, "the first drain learned a level")
	assert.False(t, ws.startedCold(), "the second server started from it: %q", ws.Loaded)
	assert.Equal(t, ws.Level, ws.loadedLevel(), "the level the second server's log says it loaded")
	assert.Greater(t, ws.Counted, 1, "the second drain's plan counts more than one pause at once")

	coldWait := cold.Timeline.HookEnd.Sub(cold.Timeline.Start)
	warmWait := warm.Timeline.HookEnd.Sub(warm.Timeline.Start)
	assert.Greater(t, warmWait, coldWait, "the warm plan leaves the preStop wait more")
	for _, r := range []*result{cold, warm} {
		if assert.NotNil(t, r.Report.Phase(drain.PhaseDrain)) {
			assert.Equal(t, drain.TimedOut, r.Report.Phase(drain.PhaseDrain).Result, "the wait ends at the plan's deadline")
		}
	}
	for _, want := range []string{"first drain of the node", "learned level", fmt.Sprintf("%d paused sandboxes loaded from the first drain", opts.N),
		fmt.Sprintf("%d new running", opts.N), "learned_concurrency=", "the second drain, which the table shows"} {
		assert.Contains(t, out.String(), want)
	}
}

// The start lines a sandboxd logs (what it learned, or that it starts cold) are kept
// whole however its writes cut them, and past the tail the rest of its log pushes out.
func TestServerLogKeepsTheStartLines(t *testing.T) {
	l := new(serverLog)
	for _, chunk := range []string{`time=x level=INFO msg="learned rates lo`, `aded" estimate=1s learned_concurrency=4` + "\n" +
		`time=x level=WARN msg="learned estimate does not fit the grace period; starting cold" estimate=1s` + "\nnext"} {
		_, _ = l.Write([]byte(chunk))
	}
	_, _ = l.Write([]byte(strings.Repeat("pause: a line of the drain\n", 2*serverLogKeep/20)))
	ws := &warmStart{Loaded: l.startLines()}
	require.Len(t, ws.Loaded, 2)
	assert.Equal(t, 4, ws.loadedLevel())
	assert.True(t, ws.startedCold(), "set aside: the plan counted on no level")
	assert.Equal(t, "pause: a line of the drain", l.last())
}

// With -warm the node's first drain is part of the verdict too: a first server that
// failed at its end (exit 1) is named, and drainsim exits 1.
func TestWarmFirstDrainIsPartOfTheVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("three real terminations with a 4 s grace period")
	}
	t.Setenv(testServerExitEnv, "1")
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"-warm", "-n", "4", "-pause", "300ms", "-grace", "4s", "-seed-poll", "1s"}, &out, &errOut)
	t.Log("\n" + out.String() + errOut.String())
	assert.Equal(t, 1, code)
	assert.Contains(t, out.String(), "first drain of the node")
	assert.Contains(t, out.String(), "exited by itself, exit status 1", "the first drain's line says how its server exited")
	assert.Contains(t, errOut.String(), "drainkit's first server (-warm) exited: exit status 1")
	assert.Contains(t, errOut.String(), "drainkit's server exited: exit status 1")
}

// With -warm and a fixed -concurrency the title of drainkit's run said its plan was made
// "with the level the node learned", where a fixed limit learns no level (the lines under
// it said so: "no level learned (-concurrency fixes the limit)"); the plan counts on the
// estimate of a pause the node learned, at the fixed limit. The title says that now.
func TestWarmTitleWithAFixedConcurrencySaysNoLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"-warm", "-concurrency", "2", "-n", "4", "-pause", "300ms", "-grace", "4s", "-seed-poll", "1s"}, &out, &errOut)
	require.Equal(t, 0, code, "%s", errOut.String())
	assert.Contains(t, out.String(), "no level learned (-concurrency fixes the limit)", "the run's own lines")
	assert.NotContains(t, out.String(), "planned with the level the node learned")
	assert.Contains(t, out.String(), "planned with the estimate of a pause the node learned (-concurrency 2 fixes the limit: no level); then 2 pauses at a time")
}

// With -warm and the adaptive limit the title of drainkit's run said its plan was made
// "with the level the node learned", before the node's first drain had learned anything:
// a first drain too short to compare two limits learns none (here 4 sandboxes, one epoch
// at the start's 8; 20 under load, row 1690), and the lines under the title said "no level
// learned", the plan counting one pause at a time. The title, written before the run, says
// the plan is made with what the first drain learned, and the lines say what.
func TestWarmTitleClaimsNoLevelTheFirstDrainDidNotLearn(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"-warm", "-n", "4", "-pause", "300ms", "-grace", "4s", "-seed-poll", "1s"}, &out, &errOut)
	require.Equal(t, 0, code, "%s", errOut.String())
	assert.Contains(t, out.String(), "no level learned (too few sandboxes to compare two limits)", "the run's own lines")
	assert.Contains(t, out.String(), "its plan counts on one pause at a time")
	assert.NotContains(t, out.String(), "level the node learned")
	assert.Contains(t, out.String(), "planned with what the node's first drain learned (below: a level, if it compared two limits, and a pause's estimate); then pauses in parallel")
}
