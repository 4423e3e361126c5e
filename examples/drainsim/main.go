package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/pid1"
)

func main() {
	fakeublk.MainIfDaemon()
	switch os.Getenv(roleEnv) {
	case modeDrainkit:
		pid1.Init() // as sandboxd's main: as PID 1 of its pod's namespace, reap runsc's orphans
		os.Exit(server.Main(context.Background(), os.Args[1:], os.Stderr))
	case modeSeed:
		os.Exit(seedMain(os.Args[1:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Main runs the simulation and returns the exit status: 0 when drainkit preserved every
// sandbox, stopped the daemon cleanly and its server exited 0 before SIGKILL (with -warm,
// in both of its node's drains: the one that learned and the one shown), 1 when it did
// not or the simulation failed or was interrupted (ctx ended: said so), 2 for bad usage, flags drainkit's server refuses included
// (checked before the seed runs).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "drainsim:", err)
		return 2
	}
	results, err := run(ctx, opts, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		// Interrupted: what failed then (a server killed at once, a termination cut
		// short) is the interrupt's doing, and its words ("preStop hook still running
		// after the process exited", "server did not start") blamed the run (row 1479).
		fmt.Fprintln(stderr, "drainsim: interrupted: the simulation did not finish")
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "drainsim:", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	code := 0
	for _, dk := range drainkitRuns(results[1]) {
		if dk.ExitErr != nil {
			which := "drainkit's server"
			if dk != results[1] {
				which = "drainkit's first server (-warm)"
			}
			fmt.Fprintf(stderr, "drainsim: %s exited: %v (run with -v for its log)\n", which, dk.ExitErr)
		}
		if dk.Preserved != dk.N || !dk.DaemonClean || dk.Timeline.Killed || dk.ExitErr != nil {
			code = 1
		}
	}
	return code
}

// drainkitRuns are drainkit's terminations: the shown one, and with -warm the node's
// first drain before it, whose losses fail the run as the shown one's do.
func drainkitRuns(dk *result) []*result {
	if dk.Warm == nil {
		return []*result{dk}
	}
	return []*result{dk.Warm.Before, dk}
}

// defaultPauseShare is drainsim's -pause-share: a node's disk writes 4 fake pauses at
// full speed at once. A fake pause stands for writing its sandbox's memory at 1 GiB/s
// (sandbox.FakeBytesPerSecond: 0.25-0.75 GiB at the default -pause), one snapshot's
// stream, and a node's local NVMe drive writes about 4 GiB/s; past 4 in flight the node
// writes no faster, each pause slower (examples/drainsim/README.md).
const defaultPauseShare = 4

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("drainsim", flag.ContinueOnError)
	// The flag package prints a bad flag's error and every flag's help itself, and Main
	// the error again: the line to act on came twice, 40 lines apart (row 1477). It says
	// nothing here; -h lists the flags.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&o.N, "n", 0, "running sandboxes on the node (default 20; 6 with -runtime runsc)")
	durflag.DurationVar(fs, &o.Pause, "pause", 0, "mean time of one pause (default 500ms); with runsc, the servers' first estimate of a checkpoint (default 3s)")
	fs.Float64Var(&o.Jitter, "jitter", 0.5, "pause times spread uniformly over pause x [1-jitter, 1+jitter] (fake runtime)")
	durflag.GraceVar(fs, &o.Grace, "grace", 0, "the pod's termination grace period, whole seconds (default 8s; 15s with -runtime runsc)")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "pauses drainkit runs at once; 0: pause's adaptive limit (from 8, between 1 and 32)")
	fs.StringVar(&o.Runtime, "runtime", "fake", "sandbox runtime: fake, or runsc for real gVisor sandboxes (root)")
	durflag.DurationVar(fs, &o.SeedPoll, "seed-poll", 3*time.Second, "how often the seed's preStop loop polls (AgentENV: 3s)")
	fs.IntVar(&o.PauseShare, "pause-share", 0, "fake pauses the node runs at full speed at once; more share that speed, as snapshots share a disk (default 4; 0: no sharing)")
	fs.Uint64Var(&o.IDSeed, "id-seed", 0, "seed of the sandbox IDs, and so of the fake pause times, both servers get (default: a random one, printed)")
	fs.BoolVar(&o.Warm, "warm", false, "show drainkit's node draining a second time: a first sandboxd drains and learns the node's level into its state directory, and a new one on that directory is terminated as the table's (the seed's as before)")
	fs.BoolVar(&o.Verbose, "v", false, "show the servers' logs")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "Usage of drainsim:")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return o, err
	} else if err != nil {
		return o, fmt.Errorf("%w (drainsim -h lists the flags)", err)
	}
	def := options{N: 20, Grace: 8 * time.Second, Pause: 500 * time.Millisecond, PauseShare: defaultPauseShare} // the flags' defaults
	if o.Runtime == "runsc" {
		def = options{N: 6, Grace: 15 * time.Second, Pause: 3 * time.Second}
	}
	// A default replaces only a flag left out: "-grace 0" or "-n 0" given is checked
	// below and refused, never silently turned into the default.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["n"] {
		o.N = def.N
	}
	if !set["grace"] {
		o.Grace = def.Grace
	}
	if !set["pause"] {
		o.Pause = def.Pause
	}
	if !set["pause-share"] {
		o.PauseShare = def.PauseShare
	}
	if !set["id-seed"] {
		o.IDSeed = rand.Uint64() | 1 // never 0, which the servers take for random IDs
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.N < 1:
		return o, fmt.Errorf("-n %d is below 1", o.N)
	case o.Grace < 3*time.Second || o.Grace > 60*time.Second:
		return o, fmt.Errorf("-grace %v: use 3s to 60s (it is real time)", o.Grace)
	case o.Grace%time.Second != 0: // the simulated kubelet would wait fractions no kubelet waits
		return o, fmt.Errorf("-grace %v is not whole seconds, which a pod's grace period is (terminationGracePeriodSeconds)", o.Grace)
	case o.Pause <= 0:
		return o, fmt.Errorf("-pause %v is not positive", o.Pause)
	case !(o.Jitter >= 0 && o.Jitter < 1): // NaN fails both
		return o, fmt.Errorf("-jitter %v is outside [0, 1)", o.Jitter)
	case o.Concurrency < 0:
		return o, fmt.Errorf("-concurrency %d is negative (0 adapts)", o.Concurrency)
	case o.Runtime != "fake" && o.Runtime != "runsc":
		return o, fmt.Errorf("-runtime %q: want fake or runsc", o.Runtime)
	case o.Runtime == "runsc" && os.Geteuid() != 0: // else sandboxd's words for its tests, as a server that exited at start
		return o, errors.New("-runtime runsc needs root: runsc's gVisor sandboxes need it; run drainsim as root (sudo), or leave -runtime out for the fake runtime")
	case o.PauseShare < 0:
		return o, fmt.Errorf("-pause-share %d is negative (0: no sharing)", o.PauseShare)
	case o.PauseShare > 0 && o.Runtime != "fake":
		return o, fmt.Errorf("-pause-share %d is the fake runtime's: real %s checkpoints share the node as they do", o.PauseShare, o.Runtime)
	case set["jitter"] && o.Runtime != "fake": // taken and ignored, the run said nothing of it
		return o, fmt.Errorf("-jitter %v is the fake runtime's: a real %s checkpoint takes what it takes", o.Jitter, o.Runtime)
	case o.IDSeed == 0:
		return o, errors.New("-id-seed 0 would give the two servers random IDs, different pause times: give a seed > 0, or leave it out for a random one")
	case o.SeedPoll <= 0:
		return o, fmt.Errorf("-seed-poll %v is not positive", o.SeedPoll)
	}
	return o, nil
}

// run terminates the node twice, seed then drainkit, printing as it goes, once
// drainkit's server has shown it takes opts (preflight).
func run(ctx context.Context, opts options, stdout, stderr io.Writer) ([]*result, error) {
	notInAPod, err := preflight(ctx, opts, stderr)
	if err != nil {
		return nil, err
	}
	pause := fmt.Sprintf("%v ±%.0f%%", opts.Pause, opts.Jitter*100)
	if opts.PauseShare > 0 {
		pause += fmt.Sprintf(" alone; the node runs %d at full speed, more share its disk", opts.PauseShare)
	}
	if opts.Runtime == "runsc" {
		pause = "a real runsc checkpoint"
	}
	fmt.Fprintf(stdout, "drainsim: a node with %d running sandboxes (%s runtime, one pause takes %s) is terminated\n"+
		"by the kubelet with a grace period of %v, twice, the same sandboxes each time (-id-seed %d).\n\n",
		opts.N, opts.Runtime, pause, opts.Grace, opts.IDSeed)
	killed := "to the whole container"
	if notInAPod != "" {
		killed = "(below: to what)"
	}
	fmt.Fprintf(stdout, "Real server processes, real signals, a real device daemon child, in real time with the\n"+
		"grace period scaled down from AgentENV's 3600 s. The kubelet is simulated (internal/kubeletsim):\n"+
		"preStop bounded by the grace period, its elapsed time truncated to whole seconds, a 2 s floor,\n"+
		"SIGTERM, then SIGKILL %s. Nothing here uses virtual time; the same\n"+
		"scenario at full scale (3600 s, 200 sandboxes x 1-3 s) runs in virtual time under testing/synctest:\n"+
		"go test -v -run FullScale ./examples/drainsim\n\n%s", killed, notInAPod)
	var results []*result
	dkTitle := "drainkit: preStop waits until the drain deadline; then " + pausesAtOnce(opts.Concurrency)
	if opts.Warm {
		// The title is written before the node's first drain has learned anything: one too
		// short to compare two limits learns no level (row 1690), and a fixed -concurrency
		// none (printWarm's lines say which), its plan counting on the estimate the node
		// learned, at the fixed limit.
		learnedWhat := "what the node's first drain learned (below: a level, if it compared two limits, and a pause's estimate)"
		if opts.Concurrency > 0 {
			learnedWhat = fmt.Sprintf("the estimate of a pause the node learned (-concurrency %d fixes the limit: no level)", opts.Concurrency)
		}
		dkTitle = "drainkit, a node that drained before (-warm): the same state directory, a new sandboxd;\n" +
			"preStop waits until the drain deadline, planned with " + learnedWhat + "; then " + pausesAtOnce(opts.Concurrency)
	}
	for _, m := range []struct{ mode, title string }{
		{modeSeed, "seed: preStop waits for zero running sandboxes, no bound; then one pause at a time"},
		{modeDrainkit, dkTitle},
	} {
		fmt.Fprintf(stdout, "== %s\n", m.title)
		var r *result
		var err error
		if m.mode == modeDrainkit && opts.Warm {
			r, err = simulateWarm(ctx, opts, stderr)
		} else {
			r, err = simulate(ctx, opts, m.mode, stderr)
		}
		if err != nil {
			return nil, err
		}
		if r.Warm != nil {
			printWarm(stdout, r.Warm)
		}
		printTimeline(stdout, r)
		fmt.Fprintln(stdout)
		results = append(results, r)
	}
	printTable(stdout, results)
	return results, nil
}

// pausesAtOnce says how many pauses drainkit runs at once, for the title.
func pausesAtOnce(concurrency int) string {
	if concurrency == 0 {
		return "pauses in parallel, as many as pay (the adaptive limit, from 8)"
	}
	return fmt.Sprintf("%d pauses at a time", concurrency)
}
