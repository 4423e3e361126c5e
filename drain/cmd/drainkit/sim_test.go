package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet: 100 nodes x 200 sandboxes, grace 3600 s, pauses of
// 1-3 s, one node at a time.
func TestSimGolden(t *testing.T) {
	code, out, errw := drainkit(t, "sim")
	require.Equal(t, exitOK, code, errw)
	golden(t, "sim-default.golden", out)
}

// lostRE reads the three "sandboxes lost" cells.
var lostRE = regexp.MustCompile(`sandboxes lost\s+(\d+) of (\d+) \S+ %\)\s+(\d+) of \d+ \S+ %\)\s+(\d+) of`)

func simLost(t *testing.T, args ...string) (seed, dk, noWait, total int) {
	t.Helper()
	code, out, errw := drainkit(t, append([]string{"sim"}, args...)...)
	require.Equal(t, exitOK, code, errw)
	m := lostRE.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	return n(m[1]), n(m[3]), n(m[4]), n(m[2])
}

func TestSimSeedLosesAlmostEverythingAndDrainkitNothing(t *testing.T) {
	seed, dk, noWait, total := simLost(t, "-nodes", "20", "-sandboxes", "100-300")
	assert.Greater(t, seed, total*99/100, "2 s after SIGTERM, one 1-3 s pause at a time")
	assert.Zero(t, dk)
	assert.Zero(t, noWait)
}

// When the work does not fit in the grace period, drainkit loses what the
// preserve window cannot hold, still never more than the seed, and is
// never SIGKILLed: the device teardown keeps its critical reserve.
func TestSimTightGraceLosesWhatDoesNotFitButNeverTheDaemon(t *testing.T) {
	seed, dk, noWait, total := simLost(t, "-nodes", "5", "-sandboxes", "200", "-grace", "60", "-concurrency", "2")
	assert.Positive(t, dk, "200 x 2 s / 2 slots is 200 s, the grace 60 s")
	assert.Less(t, dk, seed)
	assert.Equal(t, dk, noWait, "without time to spare the preStop wait ends at once either way")
	assert.Equal(t, 1000, total)
	_, out, _ := drainkit(t, "sim", "-nodes", "5", "-sandboxes", "200", "-grace", "60", "-concurrency", "2")
	assert.Regexp(t, `nodes SIGKILLed\s+5\s+0\s+0`, out)
	assert.Regexp(t, `daemons killed with live devices\s+5\s+0\s+0`, out)
}

// maxUnavailable divides the rollout: ten at once take a tenth as long.
func TestSimMaxUnavailableShortensTheRollout(t *testing.T) {
	one := (&simConfig{nodes: 40, minSB: 10, maxSB: 10, pause: time.Second, jitter: 0, concurrency: 10,
		grace: 60 * time.Second, maxUnavailable: 1, startup: 10 * time.Second, teardown: time.Second, seed: 1}).rollout(modeNoWait)
	c := simConfig{nodes: 40, minSB: 10, maxSB: 10, pause: time.Second, jitter: 0, concurrency: 10,
		grace: 60 * time.Second, maxUnavailable: 10, startup: 10 * time.Second, teardown: time.Second, seed: 1}
	ten := c.rollout(modeNoWait)
	assert.Equal(t, one.duration, 10*ten.duration)
	// Each node: one round of ten 1 s pauses, the 1 s teardown, 10 s until ready.
	assert.Equal(t, 4*(12*time.Second), ten.duration)
}

func TestScheduleStopsStartingAtTheDeadlineAndCutsAtHard(t *testing.T) {
	t0 := epoch
	s := time.Second
	times := []time.Duration{s, s, s, 3 * s, s}
	end, lost := schedule(times, 2, t0, t0.Add(2*s), t0.Add(3*s))
	// slot A: 0-1, 1-2 (2 starts at 1), then at 2 nothing more starts; slot B: 0-1, 1-4 cut at 3.
	assert.Equal(t, 2, lost, "the 3 s pause cut at hard, the last never started")
	assert.Equal(t, t0.Add(3*s), end)
}

func TestSimBadFlagsAreNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-nodes", "0"}, "-nodes must be in [1, 100000]"},
		{[]string{"-sandboxes", "5-2"}, "want N or LO-HI"},
		{[]string{"-pause", "0s"}, "-pause must be positive"},
		{[]string{"-jitter", "1"}, "-jitter must be in [0, 1)"},
		{[]string{"-concurrency", "0"}, "-concurrency must be at least 1"},
		{[]string{"-max-unavailable", "0"}, "-max-unavailable must be at least 1"},
		{[]string{"-grace", "-5"}, "must be positive"},
		{[]string{"-grace", "18446744074"}, `at most 9223372036 seconds, got "18446744074"`},
		{[]string{"-grace", "-9223372037"}, `must be positive, got "-9223372037"`}, // x 1e9 wraps to +292 years
		{[]string{"now"}, `unexpected arguments ["now"]`},
		// The largest of each alone ran for half an hour, saying nothing.
		{[]string{"-nodes", "100000", "-sandboxes", "20-100000"}, "-nodes 100000 x -sandboxes 100000 is up to 10000000000 sandboxes to simulate: at most 100000000"},
	} {
		code, _, errw := drainkit(t, append([]string{"sim"}, tc.args...)...)
		assert.Equal(t, exitUsage, code, tc.args)
		assert.Contains(t, errw, tc.says, tc.args)
	}
}

// Fault (a fresh-eyes review): a maxUnavailable or a concurrency larger
// than the fleet or the sandboxes, which Kubernetes and the library take
// as "all at once", made a slot per unit: at 9223372036854775807 sim
// panicked (makeslice: len out of range) and below that it could allocate
// gigabytes. More slots than work is the same as enough slots.
func TestSimMoreSlotsThanWorkIsAllAtOnce(t *testing.T) {
	const huge = "9223372036854775807"
	code, out, errw := drainkit(t, "sim", "-nodes", "3", "-sandboxes", "5", "-max-unavailable", huge, "-concurrency", huge)
	require.Equal(t, exitOK, code, errw)
	_, enough, _ := drainkit(t, "sim", "-nodes", "3", "-sandboxes", "5", "-max-unavailable", "3", "-concurrency", "5")
	table := func(s string) string { _, t, _ := strings.Cut(s, "\n\n"); return t }
	assert.Equal(t, table(enough), table(out))
}

// Fault (a fresh-eyes review): a node with no sandboxes running was held
// as one whose sandboxes never finish: the seed's preStop loop, which
// returns at its first count of zero, held the pod for the whole grace
// period and the node was SIGKILLed with live devices; drainkit's wait,
// which ends as soon as the count is zero (drain's "drained"), ran to the
// drain deadline. -sandboxes 0 (or a range from 0: idle nodes) printed
// nodes that had nothing to do taking an hour. And a seed node whose few
// pauses all ended in the kubelet's 2 s was SIGKILLed all the same, though
// the seed then stops its device daemon and exits.
func TestSimNodeWithNothingToDoIsNotHeld(t *testing.T) {
	c := simConfig{nodes: 1, pause: time.Second, concurrency: 8, grace: time.Hour, maxUnavailable: 1,
		startup: 30 * time.Second, teardown: time.Second, seed: 1}
	for _, mode := range []int{modeSeed, modeDrainkit, modeNoWait} {
		r := c.rollout(mode)
		assert.Equal(t, time.Second, r.tookMax, "%s: no sandbox to wait for or pause: only the device teardown", modeNames[mode])
		assert.Zero(t, r.killed, modeNames[mode])
		assert.Zero(t, r.liveDevices, modeNames[mode])
	}
	// One 0.5 s pause in the kubelet's 2 s, then the 1 s teardown.
	c.minSB, c.maxSB, c.pause, c.jitter = 1, 1, 500*time.Millisecond, 0
	seed := c.rollout(modeSeed)
	assert.Equal(t, time.Hour+1500*time.Millisecond, seed.tookMax, "the hook held the pod to the grace period's end")
	assert.Zero(t, seed.lost)
	assert.Zero(t, seed.killed, "the seed exits before SIGKILL")
	assert.Zero(t, seed.liveDevices)

	_, out, _ := drainkit(t, "sim", "-nodes", "3", "-sandboxes", "0")
	assert.Regexp(t, `nodes SIGKILLed\s+0\s+0\s+0\n`, out)
	assert.Regexp(t, `node termination, longest\s+1.0s\s+1.0s\s+1.0s\s*\n`, out)
	assert.Regexp(t, `least headroom before SIGKILL\s+3599.000s\s+3599.000s\s+3599.000s\s*\n`, out)
}

// -max-unavailable takes what the DaemonSet's rollingUpdate.maxUnavailable
// takes: a number, or a percentage of the nodes rounded up. A manifest's
// "10%" was "parse error", with nothing saying that a percentage was the
// trouble. 25% of 10 nodes is 3 at once, as "3" is; 0% and over 100% are
// named. A negative number is named as given: "-1" (a manifest's slip, a
// sign pasted in) read "-max-unavailable 0% is 0 of 10 nodes", a
// percentage nobody gave, since -1 was the flag's mark of a percentage
// still to be resolved against the nodes.
func TestSimMaxUnavailableTakesAPercentageAsTheDaemonSetDoes(t *testing.T) {
	args := []string{"sim", "-nodes", "10", "-sandboxes", "5"}
	code, pct, errw := drainkit(t, append(args, "-max-unavailable", "25%")...)
	require.Equal(t, exitOK, code, errw)
	_, three, _ := drainkit(t, append(args, "-max-unavailable", "3")...)
	table := func(s string) string { _, t, _ := strings.Cut(s, "\n\n"); return t }
	assert.Equal(t, table(three), table(pct), "ceil(25% of 10) = 3")
	assert.Contains(t, pct, "maxUnavailable 3 (25% of 10 nodes)")
	for v, want := range map[string]string{
		"0%":   "-max-unavailable 0% is 0 of 10 nodes: want at least 1",
		"101%": "for flag -max-unavailable: want a number, or a whole percentage from 0% to 100%, got \"101%\"",
		"1.5":  "for flag -max-unavailable: want a number, or a whole percentage from 0% to 100%, got \"1.5\"",
		"0":    "-max-unavailable must be at least 1, got 0",
		"-1":   "-max-unavailable must be at least 1, got -1",
		"-5":   "-max-unavailable must be at least 1, got -5",
	} {
		code, _, errw := drainkit(t, append(args, "-max-unavailable", v)...)
		assert.Equal(t, exitUsage, code, v)
		assert.Contains(t, errw, want, v)
	}
}
