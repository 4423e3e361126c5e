package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/pid1"
)

// testServerExitEnv, set in a test, is the exit status the drainkit server
// ends with once it has done its work.
const testServerExitEnv = "DRAINSIM_TEST_SERVER_EXIT"

// roleMain makes the test binary drainsim itself (main), with the flags
// that follow its -test.run.
const roleMain = "main"

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	switch os.Getenv(roleEnv) {
	case modeDrainkit:
		pid1.Init() // as main does
		code := server.Main(context.Background(), os.Args[1:], os.Stderr)
		if c, err := strconv.Atoi(os.Getenv(testServerExitEnv)); err == nil {
			code = c // a server that failed at its very end (its Report not written, say)
		}
		os.Exit(code)
	case modeSeed:
		os.Exit(seedMain(os.Args[1:], os.Stderr))
	case roleMain: // drainsim itself, its flags after the test binary's one
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		code := Main(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// The simulation tells the two apart: the seed's preStop hook overruns the grace period,
// the kubelet leaves its 2 s floor, one-at-a-time pauses save a few sandboxes and the
// device daemon is SIGKILLed; drainkit's preserves every sandbox, stops the daemon and
// exits before SIGKILL.
func TestSimulationShowsSeedLosingAndDrainkitPreservingAll(t *testing.T) {
	if testing.Short() {
		t.Skip("two real terminations with a 4 s grace period")
	}
	opts := options{N: 8, Pause: 600 * time.Millisecond, Grace: 4 * time.Second, Concurrency: 4,
		Runtime: "fake", SeedPoll: time.Second}
	var out strings.Builder
	results, err := run(context.Background(), opts, &out, io.Discard)
	require.NoError(t, err)
	t.Log("\n" + out.String())
	require.Len(t, results, 2)

	seed, dk := results[0], results[1]
	assert.True(t, seed.Timeline.HookKept, "the seed's preStop used the whole grace period")
	assert.Equal(t, 2*time.Second, seed.Timeline.Remaining, "the kubelet's 2 s floor")
	assert.True(t, seed.Timeline.Killed)
	assert.Less(t, seed.Preserved, opts.N, "the seed loses sandboxes")
	assert.LessOrEqual(t, seed.Preserved, 4, "2 s of 0.6 s pauses, one at a time")
	assert.False(t, seed.DaemonClean, "the seed's device daemon is SIGKILLed")

	assert.False(t, dk.Timeline.HookKept)
	assert.False(t, dk.Timeline.Killed)
	assert.Positive(t, dk.Timeline.Headroom())
	assert.Equal(t, opts.N, dk.Preserved)
	assert.True(t, dk.DaemonClean)
	require.NotNil(t, dk.Report)
	assert.Zero(t, dk.Report.Lost())

	for _, want := range []string{"sandboxes preserved", fmt.Sprintf("%d/8", seed.Preserved), "8/8",
		"SIGKILLed, devices live", "stopped cleanly", "in real time", "headroom left at exit"} {
		assert.Contains(t, out.String(), want)
	}
}

func TestFlagsDefaultPerRuntimeAndRejectBadValues(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20, o.N)
	assert.Equal(t, 8*time.Second, o.Grace)
	assert.Equal(t, 500*time.Millisecond, o.Pause)
	assert.Equal(t, 4, o.PauseShare, "fake pauses share a disk that writes 4 at full speed")
	o, err = parseFlags([]string{"-runtime", "runsc"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 6, o.N)
	assert.Equal(t, 15*time.Second, o.Grace)
	assert.Equal(t, 3*time.Second, o.Pause)
	assert.Zero(t, o.PauseShare, "real checkpoints share the node as they do")
	for name, args := range map[string][]string{
		"-grace":        {"-grace", "1h"},
		"-jitter":       {"-jitter", "1"},
		"-concurrency":  {"-concurrency", "-1"},
		"-runtime":      {"-runtime", "kvm"},
		"-n":            {"-n", "-3"},
		"-pause-share":  {"-pause-share", "-1"},
		"-pause-share ": {"-runtime", "runsc", "-pause-share", "2"},
	} {
		_, err := parseFlags(args, io.Discard)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
}

// Fault: -grace 0 and -n 0 were silently replaced by the defaults, and a
// NaN -jitter passed the [0, 1) check. Each is refused, naming the flag.
func TestZeroAndNaNFlagsAreRefusedNotDefaulted(t *testing.T) {
	for name, args := range map[string][]string{
		"-grace":   {"-grace", "0"},
		"-n":       {"-n", "0"},
		"-pause":   {"-pause", "0s"},
		"-jitter":  {"-jitter", "NaN"},
		"-id-seed": {"-id-seed", "0"}, // random IDs in each server: not like for like
	} {
		_, err := parseFlags(args, io.Discard)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
}

// A drainsim interrupted (Ctrl-C, SIGTERM: Main's context ended) said
// "drainsim: kubeletsim: preStop hook still running after the process exited: context
// canceled", a claim about the simulated termination, which the user had cut short, or
// "server did not start" of a server the interrupt killed as it started. It says it was
// interrupted and the simulation did not finish, exit 1 as before. The moments: the
// seed's start; the seed's timeline, printed once its termination is over, as
// drainkit's server starts; and drainkit's termination, its server's preStop (its log,
// with -v, on stderr: the last line is drainsim's).
func TestAnInterruptedRunSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	const said = "drainsim: interrupted: the simulation did not finish\n"
	for _, m := range []struct {
		when    string
		verbose bool // the servers' logs on stderr, where when is looked for
	}{
		{"== seed", false},
		{"kubelet: SIGTERM", false},
		{`msg="drain: preStop: gate closed`, true},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut logbuf.Buffer // read while Main writes them
		args := []string{"-n", "2", "-grace", "3s", "-seed-poll", "1s"}
		watched := &out
		if m.verbose {
			args, watched = append(args, "-v"), &errOut
		}
		done := make(chan int)
		go func() { done <- Main(ctx, args, &out, &errOut) }()
		require.Eventually(t, func() bool { return strings.Contains(watched.String(), m.when) }, 30*time.Second, time.Millisecond)
		cancel()
		code := <-done
		assert.Equal(t, 1, code, m.when)
		if !m.verbose {
			assert.Equal(t, said, errOut.String(), m.when)
			continue
		}
		assert.True(t, strings.HasSuffix(errOut.String(), "\n"+said), "%s: the last line: %s", m.when, errOut.String())
		assert.NotContains(t, errOut.String(), "preStop hook still running", m.when)
	}
}

// A flag drainsim cannot parse ("-pause 10", no unit; a misspelt flag) is said once, on
// stderr, with where the flags are listed, exit 2: the flag package printed the error,
// then every flag's help (about 40 lines), then Main printed the error again, the line
// to act on scrolled away between its two copies. -h still lists every flag, exit 0.
func TestABadFlagIsSaidOnceWithoutTheWholeHelp(t *testing.T) {
	for _, args := range [][]string{{"-pause", "10"}, {"-bogus"}, {"-id-seed", "-1"}} {
		var out, errOut strings.Builder
		code := Main(context.Background(), args, &out, &errOut)
		assert.Equal(t, 2, code, args)
		assert.Empty(t, out.String(), args)
		assert.Equal(t, 1, strings.Count(errOut.String(), "\n"), "%v: one line: %s", args, errOut.String())
		assert.True(t, strings.HasPrefix(errOut.String(), "drainsim: "), "%v: %s", args, errOut.String())
		assert.Contains(t, errOut.String(), "drainsim -h lists the flags", args)
	}
	var out, errOut strings.Builder
	assert.Equal(t, 0, Main(context.Background(), []string{"-h"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "-seed-poll", "-h lists every flag")
}

// Fault: -jitter with -runtime runsc was taken and did nothing: a real checkpoint takes
// what it takes, and the run's first line says so, while the flag's help promises pause
// times spread over pause x [1-jitter, 1+jitter]. It is refused, naming it, as -pause-share
// is; the default (left out) is no refusal.
func TestJitterWithRealCheckpointsIsRefused(t *testing.T) {
	_, err := parseFlags([]string{"-runtime", "runsc", "-jitter", "0.2"}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-jitter 0.2 is the fake runtime's")
	_, err = parseFlags([]string{"-runtime", "runsc"}, io.Discard)
	assert.NoError(t, err)
}

// A drainkit server that did everything it could see and then failed (exit 1:
// its Report could not be written, the termination message was lost) is a
// failed simulation: the table says how the server exited and drainsim
// exits 1, where it said "exited by itself" and exited 0.
func TestServerExitStatusIsPartOfTheVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("two real terminations with a 4 s grace period")
	}
	t.Setenv(testServerExitEnv, "1")
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"-n", "4", "-pause", "300ms", "-grace", "4s", "-seed-poll", "1s"}, &out, &errOut)
	t.Log("\n" + out.String() + errOut.String())
	assert.Equal(t, 1, code)
	assert.Contains(t, out.String(), "exit status 1", "the table says how the server exited")
	assert.Contains(t, errOut.String(), "drainkit's server exited: exit status 1")
}

// Fault: a server that refused its flags and exited at start was reported as
// "server exited at start: exit status 2 (run with -v)", its reason (in its
// log, which drainsim discards without -v) nowhere. drainkit's server refuses
// a -pause whose one round does not fit -grace; the error says so, naming the
// flags, without -v.
func TestServerExitingAtStartSaysWhy(t *testing.T) {
	opts := options{N: 1, Pause: 6 * time.Second, Grace: 8 * time.Second, Runtime: "fake", SeedPoll: time.Second}
	_, err := simulate(context.Background(), opts, modeDrainkit, io.Discard)
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "exit status 2")
	assert.Contains(t, err.Error(), "-grace 8s is too short for one round of pauses of -pause-latency 6s")
}

// Fault: flags drainkit's server refuses (a -pause whose one round does not
// fit -grace) failed drainsim only after the seed's whole termination (10 s
// at -grace 8s), with exit status 1. They fail at once, before the seed runs,
// with the server's reason and exit status 2.
func TestFlagsDrainkitRefusesFailBeforeTheSeedRuns(t *testing.T) {
	var out, errOut strings.Builder
	code := Main(context.Background(), []string{"-n", "1", "-pause", "6s", "-grace", "8s"}, &out, &errOut)
	t.Log("\n" + out.String() + errOut.String())
	assert.Equal(t, 2, code)
	assert.NotContains(t, out.String(), "== seed", "the seed's termination did not run")
	assert.Contains(t, errOut.String(), "-grace 8s is too short for one round of pauses of -pause-latency 6s")
}

// Fault: -grace 4500ms was taken, and the kubelet simulator then bounded the
// preStop hook by 4.5 s and left SIGTERM a grace of fractional seconds, a
// termination no kubelet gives: a pod's grace is whole seconds
// (terminationGracePeriodSeconds), and so are the kubelet's waits.
func TestGraceOfFractionalSecondsIsRefused(t *testing.T) {
	for _, v := range []string{"4500ms", "8.5s", "3.001s"} {
		_, err := parseFlags([]string{"-grace", v}, io.Discard)
		require.Error(t, err, v)
		assert.Contains(t, err.Error(), "-grace", v)
		assert.Contains(t, err.Error(), "whole seconds", v)
	}
	for _, v := range []string{"4", "4s", "1m"} {
		_, err := parseFlags([]string{"-grace", v}, io.Discard)
		assert.NoError(t, err, v)
	}
}

// Fault: the seed and drainkit paused different sandboxes: each server made random IDs,
// and a fake pause's latency follows from its sandbox's ID, so the two runs drew
// different latencies and the comparison was not like for like. With drainsim's
// default flags, both servers (real processes) now create the same IDs, in the same
// order, and so the same latency for each sandbox.
func TestSeedAndDrainkitPauseTheSameSandboxes(t *testing.T) {
	opts, err := parseFlags([]string{"-n", "6"}, io.Discard)
	require.NoError(t, err)
	var ids [2][]string
	for i, mode := range []string{modeSeed, modeDrainkit} {
		nd, err := startNode(context.Background(), opts, mode, "", opts.N, io.Discard)
		require.NoError(t, err, mode)
		ids[i] = listIDs(t, nd.base)
		nd.close()
	}
	fake := &sandbox.Fake{PauseLatency: opts.Pause, Jitter: opts.Jitter}
	for i := range ids {
		var lat []time.Duration
		for _, id := range ids[i] {
			lat = append(lat, fake.Latency(id))
		}
		t.Logf("%s: %v, latencies %v", []string{modeSeed, modeDrainkit}[i], ids[i], lat)
	}
	require.Len(t, ids[0], opts.N)
	assert.Equal(t, ids[0], ids[1], "the seed's sandboxes and drainkit's")
}

// listIDs returns the IDs GET /sandboxes lists, sorted: the order both servers pause in
// when they pause one at a time.
func listIDs(t *testing.T, base string) []string {
	resp, err := http.Get(base + "/sandboxes")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list []struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	sort.Strings(ids)
	return ids
}

// Fault: parallel fake pauses were free. A fake pause was a timer, so 8 at once each
// ended as soon as one alone would, where real pauses in flight share the node's disk (a
// snapshot writes the VM's memory) or CPU (a checkpoint), and the adaptive limit had no
// knee to find. With drainsim's defaults the node writes 4 pauses at full speed
// (-pause-share 4): 8 pauses of 400 ms asked of drainkit's server (a real process) at once
// are 3.2 s of full-speed work, which a node writing 4 at once cannot end in less than
// 800 ms, and none ends sooner than one alone (400 ms). Each takes about 800 ms, but the
// first to start has the disk to itself for the moment before the others join and may
// end a few milliseconds earlier (797.9 ms in a cold CI run, once draintest.Disk kept
// its device's time exactly, row 1003): the bound is on the last.
func TestParallelPausesShareTheNode(t *testing.T) {
	opts, err := parseFlags([]string{"-n", "8", "-pause", "400ms", "-jitter", "0"}, io.Discard)
	require.NoError(t, err)
	nd, err := startNode(context.Background(), opts, modeDrainkit, "", opts.N, io.Discard)
	require.NoError(t, err)
	defer nd.close()
	ids := listIDs(t, nd.base)
	took := make([]time.Duration, len(ids))
	var wg sync.WaitGroup
	start := time.Now()
	for i, id := range ids {
		wg.Go(func() {
			asked := time.Now()
			resp, err := http.Post(nd.base+"/sandboxes/"+id+"/pause", "", nil)
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, id)
			}
			took[i] = time.Since(asked)
		})
	}
	wg.Wait()
	all := time.Since(start)
	t.Logf("8 pauses of 400 ms at once took %v, %v in all", took, all)
	assert.GreaterOrEqual(t, all, 800*time.Millisecond, "8 at once, 4 at full speed: 3.2 s of work at 4 at once")
	for i, d := range took {
		assert.GreaterOrEqual(t, d, 400*time.Millisecond, "%s: no pause ends sooner than alone", ids[i])
	}
}
