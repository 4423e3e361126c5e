package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/apiflags"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/gracefit"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/satdur"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/httpsource"
)

const planUsage = `usage: drainkit plan (-server URL | -sizes FILE | -count N) [-state-dir DIR | -rates FILE] [-grace SECONDS]
       [-kubelet-grace SECONDS | -kubelet-config FILE [-priority N]] [flags]

Answers, before a rollout, whether the node's grace period is enough: would
every sandbox be preserved if the pod were terminated now? It counts the
sandboxes, takes the estimate of one pause and the concurrency the server
learned at its last shutdown, lays out the same plan the server's drain.Drainer
makes (deadline.Plan: the preserve reserve is ceil(sandboxes / concurrency) x
estimate, then the teardown steps' reserves, all before the budget's deadline,
the grace period less its margin before SIGKILL), and prints:

  - the predicted preserve time at the chosen or learned concurrency (rounds
    of the learned mean pause), beside what the drain reserves for it (rounds
    of the estimate, max(mean, p90): conservative, since a reserve too small
    costs sandboxes),
  - the spare time (how much more work would still fit), or the shortfall,
  - whether every sandbox would be preserved,
  - the smallest terminationGracePeriodSeconds that would fit,
  - and the same verdict for a termination the kubelet makes on its own
    (graceful node shutdown, a soft eviction), in the kubelet's grace:
    -kubelet-grace, else the node's configuration (-kubelet-config FILE,
    the kubelet's --config: node shutdown's slice for the pod's -priority
    and a soft eviction's evictionMaxPodGracePeriod, the smaller, as the
    kubelet computes them; a server whose recorded -kubelet-grace is
    none or longer does not fit, its drain planning past the node's end),
    else the one the server recorded (its -kubelet-grace; sandboxd, the
    supervisor and the gVisor worker record it when they have API access
    to their pod, without which their drain cannot tell such a termination
    from a deletion). It gives the pod the slice of shutdownGracePeriod for
    its priority (less shutdownGracePeriodCriticalPods), however long its
    terminationGracePeriodSeconds; not known, the plan says it is not
    planned.

The sandboxes come from one of:
  -server URL   the live server's API, read exactly as the supervisor reads it
                (pause/httpsource; -api agentenv for AgentENV's node API, and
                the same shape flags as the supervisor, which need -server).
                Sandboxes with a size (-size-field) are planned by size with
                -rate-mib; without, by rounds, and as the server's drain,
                which has measured no rate when it starts, never less than
                the largest at the estimate for the average size.
  -sizes FILE   a JSON list of sandbox sizes in bytes, e.g. [2147483648, 536870912]
                ("-" reads stdin)
  -count N      N sandboxes of the learned estimate each

A server whose limit adapts (its rates have max_limit: sandboxd's and the
supervisor's default, -concurrency 0) is planned as its next drain runs: the
drain reserves rounds of the limit its Preserver starts at (built here from
the rates as the server builds it: 8 whatever it learned), which decides when
the preStop wait ends; the predicted time is a round at that start, then
rounds at the level it learned (learned_limit), at the mean pause measured at
that level (learned_mean_ns; the drain reserves at its estimate,
learned_estimate_ns), and, beside it, the time of a
climb doubling from the start, should the first round not keep to its
estimates. One that learned nothing (a node's first drain) reserves one
pause at a time, and its Run starts at 8 at a speed nothing measured: the
predicted time is "not known", with the time were 8 at once as fast as one
and were they no faster than one at a time, and how many sandboxes would
not be preserved is counted one at a time, as the drain reserves. One
sandbox is one pause whatever runs at once: its time is predicted.
-concurrency N plans a fixed limit of N instead.

What the server learned comes from -state-dir DIR (sandboxd writes
DIR/learned-rates.json at every shutdown and starts from it) or -rates FILE;
-estimate, -concurrency, -grace and -step override it, and are needed where
no rates file exists (a server that does not write one, or a node that has
not drained yet: with -grace and -estimate the plan is made from the flags).
A -state-dir that does not exist is refused (exit 2): every server makes its
state directory when it starts, so it is no node's (a mistyped path).

A pod whose preStop hook is a sleep (lifecycle.preStop.sleep; the server's
DRAINKIT_PRESTOP_SLEEP) is planned with -prestop-sleep SECONDS: the kubelet
sleeps out of the grace before SIGTERM, which is when the drain's work
starts, and SIGKILL comes max(grace - sleep, 2 s) after SIGTERM. The rates
file does not record it: without the flag, the plan counts the sleep as
time the drain has. The verdict and the smallest grace are drain.New's own
check (deadline.Plan.Shortfall), the sleep counted alike: a plan that DOES
NOT FIT is a server that New refuses to make.

Exit status: 0 when every sandbox fits (in the node's shutdown too, when its
grace is known), 1 when not (so it can gate a rollout in CI/CD), 2 for bad
flags, a server that cannot be read or a bad file.

Examples:

	drainkit plan -server http://127.0.0.1:8080 -state-dir /var/lib/sandboxd
	drainkit plan -api agentenv -server http://127.0.0.1:8000 -api-key-file key -grace 3600 -estimate 12s -concurrency 8
	drainkit plan -sizes sizes.json -rate-mib 400 -concurrency 8 -grace 600 -step ublk=30s,critical
	drainkit plan -count 200 -state-dir /var/lib/sandboxd -grace 30 || echo "raise terminationGracePeriodSeconds"
	drainkit plan -server http://127.0.0.1:8080 -state-dir /var/lib/sandboxd -kubelet-config /var/lib/kubelet/config.yaml
`

// stepFlags collects repeated -step NAME=DURATION[,critical].
type stepFlags []learned.Step

func (s *stepFlags) String() string { return "" }

func (s *stepFlags) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=DURATION[,critical], got %q", v)
	}
	durS, crit, _ := strings.Cut(rest, ",")
	d, err := time.ParseDuration(durS)
	if err != nil || d < 0 {
		return fmt.Errorf("step %s: want a non-negative duration such as 1.5s, got %q", name, durS)
	}
	if crit != "" && crit != "critical" {
		return fmt.Errorf("step %s: the only flag after the duration is \"critical\", got %q", name, crit)
	}
	*s = append(*s, learned.Step{Name: name, Reserve: d, Critical: crit == "critical"})
	return nil
}

// planInput is everything a plan is made of, with where each came from.
type planInput struct {
	source         string  // where the sandboxes came from
	sizes          []int64 // one per sandbox; 0 unknown
	estimate       time.Duration
	estimateSrc    string
	mean           time.Duration // the learned mean of one pause; the estimate when nothing was learned
	meanSrc        string
	limit          int  // at the start: the preserve phase's first round
	reserved       int  // what the drain's reserve counts rounds of: limit, or an adaptive server's learned level below it, untested yet
	unmeasured     bool // adaptive with nothing measured: the drain reserves one at a time, its Run starts at limit at a speed no one knows
	level          int  // what the preserve phase runs at after its first round: limit unless it adapts
	ceiling        int  // the adaptive limit's ceiling (the rates' max_limit); 0: a fixed limit
	limitSrc       string
	grace          time.Duration
	graceSrc       string
	graceFromRates bool          // the grace is the rates' (the last shutdown's), not -grace
	kubeletGrace   time.Duration // the kubelet's own termination's grace (graceful node shutdown); 0: not known
	kubeletSrc     string
	kubeletOff     string                             // why the node's configuration gives none to plan (graceful node shutdown off), or ""
	kubeletWrong   string                             // why the server's drain would not keep to the node's grace, or ""
	kubeletRaise   func(grace time.Duration) []string // the node's settings to raise for a kubelet grace, when -kubelet-config's is the one planned; nil: not known
	margin         time.Duration                      // 0: the default for the grace
	sleep          time.Duration                      // the pod's preStop sleep (deadline.Config.PreStopSleep), 0: none
	rateMiB        float64                            // MiB/s of one pause, 0: none
	steps          []learned.Step
	stepsSrc       string
	rates          *learned.Rates
	ratesPath      string
	noRates        bool // ratesPath does not exist yet: the flags stand in for it
}

// defaultLimit, defaultReserved and defaultEstimate are what a Preserver
// with pause's defaults starts from: the limit its first Run starts at (a
// Run of no sandboxes reports it), the limit its Limit reports for a
// reserve before a Run has measured one (1), and its Estimator's estimate.
var defaultLimit, defaultReserved, defaultEstimate = pauseDefaults()

// noSandboxes lists none: the plan builds Preservers only to read them.
var noSandboxes = pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) { return nil, nil })

func pauseDefaults() (start, reserved int, estimate time.Duration) {
	p, err := pause.New(noSandboxes, pause.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	start, err = learned.StartLimit(pause.Config{})
	if err != nil {
		panic(err)
	}
	return start, p.Limit(), p.Estimator().Estimate()
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("plan", planUsage, stdout)
	server := fs.String("server", "", "the live server's API base `URL` (sandboxd: http://127.0.0.1:8080)")
	sizesFile := fs.String("sizes", "", "JSON list of sandbox sizes in bytes (`FILE`, - for stdin)")
	count := fs.Int("count", 0, "plan for `N` sandboxes of the estimate each")
	stateDir := fs.String("state-dir", "", "the server's state `DIR`; its "+learned.File+" holds what it learned")
	ratesFile := fs.String("rates", "", "the learned rates `FILE` (default: STATE_DIR/"+learned.File+")")
	var grace time.Duration
	durflag.GraceVar(fs, &grace, "grace", 0, "terminationGracePeriodSeconds, in `SECONDS` or as a duration (default: the rates', the server's at its last shutdown: give it after a change)")
	var kubeletGrace time.Duration
	durflag.GraceVar(fs, &kubeletGrace, "kubelet-grace", 0, "the grace the kubelet gives the pod when it terminates it on its own (graceful node shutdown: shutdownGracePeriod less shutdownGracePeriodCriticalPods), in `SECONDS` or as a duration, planned beside the deletion (default: the rates', the server's -kubelet-grace)")
	kubeletConfig := fs.String("kubelet-config", "", "the node's KubeletConfiguration `FILE` (the kubelet's --config, e.g. /var/lib/kubelet/config.yaml): the kubelet's own grace from it, and whether the server's -kubelet-grace is it")
	priority := fs.Int("priority", 0, "the pod's priority (its PriorityClass's value; system-node-critical is 2000001000), for -kubelet-config's node-shutdown groups")
	margin := new(time.Duration)
	durflag.DurationVar(fs, margin, "margin", 0, "margin kept before SIGKILL (default: the library's for the grace, a tenth of it within [1.5s, 5s])")
	var sleep time.Duration
	durflag.GraceVar(fs, &sleep, "prestop-sleep", 0, "the pod's preStop sleep hook (lifecycle.preStop.sleep.seconds; the server's DRAINKIT_PRESTOP_SLEEP), in `SECONDS` or as a duration: the kubelet sleeps it out of the grace before SIGTERM, where the drain's work starts (default: none)")
	estimate := new(time.Duration)
	durflag.DurationVar(fs, estimate, "estimate", 0, "time one pause takes (default: learned, else "+defaultEstimate.String()+")")
	limit := fs.Int("concurrency", 0, "pauses at once (default: learned, else "+strconv.Itoa(defaultLimit)+")")
	rate := fs.Float64("rate-mib", 0, "MiB per second one pause writes, to plan sized sandboxes by size (0: by count)")
	timeout := new(time.Duration)
	durflag.DurationVar(fs, timeout, "timeout", 10*time.Second, "bound on listing the live server")
	var steps stepFlags
	fs.Var(&steps, "step", "a teardown step after preserving, `NAME=DURATION[,critical]`; repeatable, replaces the learned steps")
	var api apiflags.Flags
	api.Register(fs)
	pos, err := parse(fs, args)
	countSet, apiSet := false, ""
	fs.Visit(func(f *flag.Flag) {
		countSet = countSet || f.Name == "count"
		if apiSet == "" && isAPIFlag(f.Name) {
			apiSet = f.Name
		}
	})
	if err == nil && apiSet != "" && *server == "" {
		// They read the live server, and nothing else does: ignored, a
		// missing key file went unnoticed.
		err = fmt.Errorf("-%s shapes how -server is read: give -server, or leave the API flags out", apiSet)
	}
	switch {
	case !countSet:
		*count = -1 // not given
	case *count < 0 && err == nil:
		err = fmt.Errorf("-count must not be negative, got %d", *count)
	case *count > maxCount && err == nil: // one size each is allocated
		err = fmt.Errorf("-count must be at most %d (sandboxes on one node), got %d", maxCount, *count)
	}
	if err == nil {
		err = api.Finish(fs) // the key goes with api.Config(); a key file is New's to read
	}
	if err == nil {
		err = checkPlanFlags(pos, *server, *sizesFile, *count, *margin, *estimate, *limit, *rate)
	}
	if err == nil {
		err = checkZeroGiven(fs)
	}
	switch {
	case err != nil:
	case *kubeletConfig != "" && kubeletGrace > 0:
		err = errors.New("give -kubelet-grace or -kubelet-config, not both: the node's configuration says what the kubelet gives")
	case *priority != 0 && *kubeletConfig == "":
		err = errors.New("-priority picks a group of -kubelet-config's node shutdown: give -kubelet-config")
	case *priority < math.MinInt32 || *priority > math.MaxInt32:
		err = fmt.Errorf("-priority must be a priority class's value (an int32), got %d", *priority)
	}
	if err == nil && *timeout <= 0 {
		// Zero gave a listing that failed at once with a bare "context
		// deadline exceeded", the flag unnamed.
		err = fmt.Errorf("-timeout must be positive (the bound on listing the live server), got %v", *timeout)
	}
	if err != nil {
		return usageError(stderr, "plan", err)
	}

	in := planInput{margin: *margin, sleep: sleep, rateMiB: *rate}
	if err := in.loadRates(*stateDir, *ratesFile, grace, *estimate); err != nil {
		fmt.Fprintf(stderr, "drainkit plan: %v\n", err)
		return exitUsage
	}
	switch {
	case *server != "":
		err = in.listServer(ctx, *server, *timeout, api.Config())
	case *sizesFile != "":
		err = in.readSizes(*sizesFile)
	default:
		in.sizes, in.source = make([]int64, *count), fmt.Sprintf("-count %d", *count)
	}
	if err != nil {
		fmt.Fprintf(stderr, "drainkit plan: %v\n", err)
		return exitUsage
	}
	if err := in.resolve(grace, *estimate, *limit, steps); err != nil {
		return usageError(stderr, "plan", err)
	}
	if err := in.resolveKubelet(kubeletGrace, *kubeletConfig, *priority); err != nil {
		fmt.Fprintf(stderr, "drainkit plan: %v\n", err)
		return exitUsage
	}
	res, err := in.plan()
	if err != nil {
		fmt.Fprintf(stderr, "drainkit plan: %v\n", err)
		return exitUsage
	}
	var out bytes.Buffer
	res.print(&out, &in)
	if _, err := stdout.Write(trimLines(out.Bytes())); err != nil {
		fmt.Fprintf(stderr, "drainkit plan: %v\n", err)
		return exitUsage
	}
	if !res.fits || res.node != nil && !res.node.fits {
		return exitNoFit
	}
	return exitOK
}

// isAPIFlag reports whether name is one of the API flags (apiflags.Flags).
func isAPIFlag(name string) bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(apiflags.Flags).Register(fs)
	return fs.Lookup(name) != nil
}

func checkPlanFlags(pos []string, server, sizes string, count int, margin, estimate time.Duration, limit int, rate float64) error {
	given := 0
	for _, g := range []bool{server != "", sizes != "", count >= 0} {
		if g {
			given++
		}
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected arguments %q", pos)
	case given != 1:
		return errors.New("give exactly one of -server, -sizes and -count")
	case margin < 0:
		return fmt.Errorf("-margin must not be negative, got %v", margin)
	case estimate < 0:
		return fmt.Errorf("-estimate must not be negative, got %v", estimate)
	case limit < 0:
		return fmt.Errorf("-concurrency must be at least 1, got %d", limit)
	case !(rate >= 0) || math.IsInf(rate, 1):
		return fmt.Errorf("-rate-mib must be a finite number >= 0, got %v", rate)
	}
	return nil
}

// checkZeroGiven refuses -estimate and -concurrency given as zero: zero
// is how an unset one reads, so a plan took the learned value (or the
// library's default) and said "no -estimate" of a flag the operator typed.
func checkZeroGiven(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch v := f.Value.String(); {
		case err != nil:
		case f.Name == "estimate" && (v == "0s" || v == "0"):
			err = errors.New("-estimate must be positive, got 0: leave it out to plan with the learned estimate (else " + defaultEstimate.String() + ")")
		case f.Name == "concurrency" && v == "0":
			err = errors.New("-concurrency must be at least 1, got 0: leave it out to plan with the learned limit (else " + strconv.Itoa(defaultLimit) + ")")
		}
	})
	return err
}

// loadRates reads the learned rates from file, else STATE_DIR's; a missing
// file is no error when grace and estimate (the flags) stand in for it.
func (in *planInput) loadRates(stateDir, file string, grace, estimate time.Duration) error {
	switch {
	case file != "":
		in.ratesPath = file
	case stateDir != "":
		in.ratesPath = filepath.Join(stateDir, learned.File)
	default:
		return nil
	}
	r, err := learned.Read(in.ratesPath)
	if errors.Is(err, learned.ErrNone) {
		if err := noStateDir(stateDir, file); err != nil {
			return err
		}
		// A node that never drained has none: the flags given stand in for
		// it (the runbook's command, run on every node, failed on each new
		// one while asking for the flags it had). The concurrency has the
		// library's default, which the output names.
		var missing []string
		if grace <= 0 {
			missing = append(missing, "-grace")
		}
		if estimate <= 0 {
			missing = append(missing, "-estimate")
		}
		if len(missing) == 0 {
			in.noRates = true
			return nil
		}
		return fmt.Errorf("%w: the server writes it at its first shutdown; until then give %s (and -concurrency for a server with a fixed one)",
			err, strings.Join(missing, " and "))
	}
	in.rates = r
	return err
}

// noStateDir refuses a rates file whose directory does not exist: every
// server makes its state directory when it starts (internal/statedir), so
// none keeps its state there, and the plan must not take a mistyped path
// for a node that never drained. The error names the flag as given (-rates
// FILE, else -state-dir DIR).
func noStateDir(stateDir, file string) error {
	dir, flag := stateDir, "-state-dir "+stateDir
	if file != "" {
		dir, flag = filepath.Dir(file), "-rates "+file
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if file != "" {
		flag += ": no such directory " + dir
	} else {
		flag += ": no such directory"
	}
	return fmt.Errorf("%s: a server makes its state directory when it starts (sandboxd's, the supervisor's and the gVisor worker's -state-dir), "+
		"so no server keeps its learned rates there: give the directory the server uses on this node", flag)
}

func (in *planInput) listServer(ctx context.Context, url string, timeout time.Duration, cfg httpsource.Config) error {
	src, err := httpsource.New(url, cfg)
	if err != nil {
		return fmt.Errorf("-server or the API flags: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sbs, err := src.List(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("-server %s: listing the sandboxes took longer than -timeout %v: %w", url, timeout, err)
	}
	if err != nil {
		return fmt.Errorf("-server %s: listing the sandboxes: %w", url, err)
	}
	if n := unnamed(sbs); n > 0 {
		return fmt.Errorf("-server %s: %d of the %d running sandboxes listed have no ID: no pause request can name them, so a drain now would lose them, whatever the grace", url, n, len(sbs))
	}
	in.source = fmt.Sprintf("%s (live)", url)
	for _, sb := range sbs {
		var size int64
		if s, ok := sb.(pause.Sized); ok {
			size = s.Size()
		}
		in.sizes = append(in.sizes, size)
	}
	return nil
}

// unnamed counts the sandboxes of a listing that have no ID (httpsource
// lists a running one without an ID with the ID "").
func unnamed(sbs []pause.Sandbox) int {
	n := 0
	for _, sb := range sbs {
		if sb.ID() == "" {
			n++
		}
	}
	return n
}

func (in *planInput) readSizes(path string) error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	var sizes []int64
	if err := json.Unmarshal(data, &sizes); err != nil {
		return fmt.Errorf("-sizes %s: want a JSON list of sizes in bytes such as [2147483648, 536870912]: %w", path, err)
	}
	for i, s := range sizes {
		if s < 0 {
			return fmt.Errorf("-sizes %s: element %d is negative (%d)", path, i, s)
		}
	}
	in.sizes, in.source = sizes, path
	return nil
}

// resolve picks every input from the flags, else the rates, else the
// library's defaults, and says where each came from.
func (in *planInput) resolve(grace, estimate time.Duration, limit int, steps []learned.Step) error {
	r := in.rates
	in.mean, in.meanSrc = 0, ""
	switch {
	case estimate > 0:
		in.estimate, in.estimateSrc = estimate, "-estimate"
	case r != nil && r.Estimate > 0:
		in.estimate = r.Estimate
		in.estimateSrc = fmt.Sprintf("learned from %d pauses: mean %s, p90 %s", r.Observations, secs(r.Mean), secs(r.P90))
		if r.Observations == 0 {
			in.estimateSrc = "the server's prior (no pause measured yet)"
		}
	default:
		in.estimate, in.estimateSrc = defaultEstimate, "the library's default: nothing learned, no -estimate"
	}
	in.mean, in.meanSrc = in.estimate, "the estimate"
	if estimate == 0 && r != nil && r.Observations > 0 && r.Mean > 0 {
		in.mean, in.meanSrc = r.Mean, "the learned mean pause"
	}
	switch {
	case limit > 0 && r != nil && r.MaxLimit > 0:
		// What if the server ran at a fixed limit: say that its rates are an adaptive server's.
		in.limit, in.limitSrc = limit, fmt.Sprintf("-concurrency: a fixed limit, where the server that wrote the rates adapts (up to %d)", r.MaxLimit)
	case limit > 0:
		in.limit, in.limitSrc = limit, "-concurrency"
	case r != nil && r.MaxLimit > 0:
		if err := in.adaptiveStart(r); err != nil {
			return err
		}
		if level, est := r.Level(); level > 0 && estimate == 0 && est != r.Estimate {
			// The server's Estimator starts from the estimate measured at the level (the
			// pauses of the drain that learned it that ran beside about that many, not the
			// drain's mix; or a drain at a fixed limit since measured its own): the live
			// reserve's.
			// The prediction is at the mean measured with it, where the file keeps one: the
			// estimate is max(mean, p90), the reserve's rule (drainsim -warm: 3 rounds of 8
			// at 1.35 s predicted 4.05 s, 2.44 s measured).
			in.estimate, in.mean = est, est
			in.estimateSrc = fmt.Sprintf("the estimate measured at the level %d, learned with it", level)
			in.meanSrc = fmt.Sprintf("the estimate (%s keeps no mean at the level: written before learned_mean_ns)", learned.File)
			if m := r.LevelMean(); m > 0 {
				in.mean, in.meanSrc = m, fmt.Sprintf("the mean measured at the level %d, learned with it", level)
			}
		}
	case r != nil && r.Limit > 0:
		in.limit, in.limitSrc = r.Limit, "learned"
	default:
		in.limit, in.reserved, in.unmeasured = defaultLimit, defaultReserved, defaultReserved < defaultLimit
		in.limitSrc = fmt.Sprintf("the library's default, nothing learned, no -concurrency: adaptive, starts at %d and climbs; planned at %d (nothing measured: the drain counts on one at a time)", in.limit, in.reserved)
	}
	if in.level == 0 {
		in.level = in.limit
	}
	if in.reserved == 0 {
		in.reserved = in.limit
	}
	switch {
	case grace > 0:
		in.grace, in.graceSrc = grace, "-grace"
	case r != nil && r.Grace > 0:
		// The grace of the server that wrote the rates, at its shutdown: one
		// restarted since with another -grace is not seen here (a node
		// planned at 8 s FITS lost 12 of 40 in the 5 s it ran with).
		in.grace, in.graceFromRates = r.Grace, true
		in.graceSrc = fmt.Sprintf("the server's at its last shutdown, %s: give -grace if it was changed since", r.Written.UTC().Format(time.RFC3339))
	default:
		return errors.New("-grace is required without a rates file that has the server's grace period")
	}
	switch {
	case len(steps) > 0:
		in.steps, in.stepsSrc = steps, "-step"
	case r != nil:
		in.steps, in.stepsSrc = r.Steps, "the server's"
	default:
		in.stepsSrc = "none given"
	}
	seen := map[string]bool{drain.PhaseDrain: true, drain.PhaseGate: true, drain.PhasePreserve: true}
	for _, s := range in.steps {
		if seen[s.Name] {
			return fmt.Errorf("-step %s: the name is taken (the drain's own phases are drain, gate and preserve; steps are unique)", s.Name)
		}
		seen[s.Name] = true
	}
	if in.noRates {
		in.estimateSrc += fmt.Sprintf(" (no %s yet: the server writes it at its first shutdown)", in.ratesPath)
	}
	if in.ratesPath != "" && r != nil {
		in.estimateSrc += fmt.Sprintf(" (%s, written %s)", in.ratesPath, r.Written.UTC().Format(time.RFC3339))
	}
	return nil
}

// resolveKubelet takes the kubelet's own grace from the flag (0: not
// given), else from the node's KubeletConfiguration at config (""), else
// from the rates. The server records the one its drain uses
// (drain.Config.KubeletGrace), and none when it cannot tell such a
// termination from a deletion (no API access to its pod): its drain then
// plans the pod's whole grace, which the kubelet cuts short.
func (in *planInput) resolveKubelet(flag time.Duration, config string, priority int) error {
	r := in.rates
	switch {
	case flag > 0:
		in.kubeletGrace, in.kubeletSrc = flag, "-kubelet-grace"
	case config != "":
		return in.fromKubeletConfig(config, int32(priority))
	case r != nil && r.KubeletGrace > 0:
		in.kubeletGrace, in.kubeletSrc = r.KubeletGrace, "the server's -kubelet-grace"
	}
	return nil
}

// fromKubeletConfig takes the kubelet's own grace from the node's
// configuration at path for a pod of priority (kubeletconf.Config.OwnGrace),
// and says where the server's recorded one (the rates') is not it.
func (in *planInput) fromKubeletConfig(path string, priority int32) error {
	c, err := kubeletconf.Read(path)
	if err != nil {
		return fmt.Errorf("-kubelet-config: %w", err)
	}
	in.kubeletGrace, _ = c.OwnGrace(priority)
	var from []string
	if shutdown, ok := c.ShutdownGrace(priority); ok {
		from = append(from, fmt.Sprintf("a node shutdown gives priority %d %s", priority, shutdown))
	} else {
		in.kubeletOff = fmt.Sprintf("graceful node shutdown is off in %s (no shutdownGracePeriod): a node shutdown is systemd's, with no preStop hook, SIGTERM and SIGKILL at its stop timeout", path)
	}
	if soft, ok := c.SoftEvictionGrace(); ok {
		from = append(from, fmt.Sprintf("a soft eviction %s", soft))
	}
	if len(from) == 0 {
		return nil
	}
	in.kubeletSrc = fmt.Sprintf("%s: %s", path, strings.Join(from, ", "))
	in.kubeletRaise = func(grace time.Duration) []string { return c.Raise(priority, grace) }
	if r := in.rates; r != nil && r.KubeletGrace != in.kubeletGrace {
		switch server := r.KubeletGrace; {
		case server == 0:
			in.kubeletWrong = "the server recorded no -kubelet-grace (none given, or no API access to its pod): its drain plans the pod's whole grace when the kubelet ends the pod on its own"
		case server > in.kubeletGrace:
			in.kubeletWrong = fmt.Sprintf("the server's -kubelet-grace is %s: its drain plans past the node's end", server)
		default: // shorter: its drain ends early, and is planned as it runs
			in.kubeletSrc += fmt.Sprintf("; the server's drain keeps to its -kubelet-grace, %s, shorter", server)
			in.kubeletGrace, in.kubeletRaise = server, nil
		}
	}
	return nil
}

// adaptiveStart sets the limits of the next drain of a server whose limit
// adapts (the rates' max_limit), as sandboxd and the supervisor start it:
// the Preserver they build from the rates (the learned level under the
// ceiling, only with the estimate its first epoch checks it against) is
// built here too, and the limit it reports before its first Run is the one
// the drain's live reserve counts rounds of at SIGTERM, and so what decides
// when the preStop wait ends. The preserve phase then runs at the learned
// level from its second round, when the first epoch keeps to the estimate
// (a level above the start) or is slower than it (below the start);
// with none learned it climbs from the start, which the plan does not
// predict (it plans at the start).
func (in *planInput) adaptiveStart(r *learned.Rates) error {
	cfg := pause.Config{MaxLimit: r.MaxLimit}
	if level, _ := r.Level(); level > 0 {
		cfg.Limit = min(level, r.MaxLimit)
	}
	p, err := pause.New(noSandboxes, cfg)
	if err != nil {
		return fmt.Errorf("%s: max_limit %d, learned_limit %d: %w", in.ratesPath, r.MaxLimit, r.LearnedLimit, err)
	}
	// The Preserver's Limit before its first Run is what the live reserve
	// counts on: the start, or a learned level below it, untested yet.
	in.limit, in.reserved, in.ceiling = min(defaultLimit, max(r.MaxLimit, 1)), p.Limit(), r.MaxLimit
	if in.ceiling <= 1 {
		in.limit = in.reserved
	}
	in.level = cmp.Or(cfg.Limit, in.limit)
	in.unmeasured = cfg.Limit == 0 && in.reserved < in.limit
	switch {
	case in.ceiling <= 1:
		// pause fixes a limit whose ceiling is 1: nothing to adapt.
		in.limitSrc = fmt.Sprintf("a ceiling of %d: fixed at %d", in.ceiling, in.limit)
	case cfg.Limit == 0 && r.LearnedLimit > 0:
		// As the servers start: a level without the estimate its first epoch checks it against is set aside.
		in.limitSrc = fmt.Sprintf("adaptive up to %d, learned %d, not taken without a learned estimate to check it against: starts at %d and climbs; planned at %d (nothing measured: the drain counts on one at a time)",
			in.ceiling, r.LearnedLimit, in.limit, in.reserved)
	case cfg.Limit == 0:
		in.limitSrc = fmt.Sprintf("adaptive up to %d, nothing learned: starts at %d and climbs; planned at %d (nothing measured: the drain counts on one at a time)",
			in.ceiling, in.limit, in.reserved)
	case in.level == in.limit:
		in.limitSrc = fmt.Sprintf("adaptive up to %d: starts at %d, the level learned", in.ceiling, in.limit)
	case in.level < in.limit:
		// pause takes a level below its start when the first epoch is slower than its estimates.
		in.limitSrc = fmt.Sprintf("adaptive up to %d: starts at %d; the level learned, %d, once the first round is slower than its estimates (%d past the knee), and the drain reserves with it",
			in.ceiling, in.limit, in.level, in.limit)
	default:
		in.limitSrc = fmt.Sprintf("adaptive up to %d: starts at %d, the drain reserves with it; the level learned, %d, once the first round keeps to the estimate",
			in.ceiling, in.limit, in.level)
	}
	return nil
}

// planResult is what the plan says.
type planResult struct {
	predicted time.Duration // the preserve time expected: ceil(n/limit) x mean, or by size; unmeasured: were limit at once as fast as one
	serial    time.Duration // unmeasured: the preserve time were pauses at once no faster than one at a time (0: measured)
	climb     time.Duration // an adaptive limit's preserve time if its first round does not confirm the level: 0, none
	climbFrom []int         // the levels of that climb's rounds below the learned level
	climbLeft int           // the pauses that climb leaves to rounds at the learned level
	reserve   time.Duration // the preserve reserve the plan holds: ceil(n/limit) x estimate, or by size
	byRounds  bool          // by rounds of limit (else by size)
	largest   bool          // the largest sandbox with a size outlasts the rounds (largestAtPrior)
	windows   []deadline.Window
	spare     time.Duration // the drain window: what the work could grow by
	shortfall time.Duration
	fits      bool
	minGrace  time.Duration // 0: none up to gracefit.Max
	budget    deadline.State
	node      *nodePlan // the kubelet's own termination, when its grace is known and shorter; nil: none
}

// A nodePlan is the plan of a termination the kubelet makes on its own
// (graceful node shutdown): the same work, in its grace.
type nodePlan struct {
	windows   []deadline.Window
	shortfall time.Duration
	fits      bool
	minGrace  time.Duration // the smallest kubelet grace that holds the work; 0: none up to gracefit.Max
}

// maxCount bounds -count: far more sandboxes than one node runs.
const maxCount = 1000000

// preserveReserve is the preserve phase's reserve: the Drainer's own,
// ceil(sandboxes / limit) x estimate (deadline.Work) and never less than
// the largest sandbox with a size at the estimate (largestAtPrior), or,
// for sandboxes with sizes and a -rate-mib, the time the longest-first
// schedule over limit slots takes to pause them all.
func (in *planInput) preserveReserve() (deadline.Reserve, bool) {
	times := in.pauseTimes()
	if times == nil {
		return deadline.Fixed(max(in.roundsReserve(), in.largestAtPrior(in.estimate))), true
	}
	return deadline.Fixed(makespan(times, in.reserved, in.reserved)), false
}

// roundsReserve is ceil(sandboxes / the limit reserved with) x estimate.
func (in *planInput) roundsReserve() time.Duration {
	n := len(in.sizes)
	return roundsAt(n, in.reserved, in.estimate)
}

// largestAtPrior is the time the largest sandbox with a size takes when
// one of the average size takes est, or 0 when none has a size: what a
// Preserver that has measured no rate (the server's, at its drain's start:
// the rates file keeps none) takes a Sized sandbox to take (pause.Sized),
// and what the Drainer's live reserve counts it at, as the longest it
// never reserves less than.
func (in *planInput) largestAtPrior(est time.Duration) time.Duration {
	if len(in.sizes) == 0 {
		return 0
	}
	return in.atPrior(slices.Max(in.sizes), est)
}

// atPrior is the time a sandbox of size bytes takes when one of the
// average size (of those with a size) takes est; 0 for no size.
func (in *planInput) atPrior(size int64, est time.Duration) time.Duration {
	var n int
	var sum float64
	for _, s := range in.sizes {
		if s > 0 {
			n, sum = n+1, sum+float64(s)
		}
	}
	if size <= 0 || n == 0 {
		return 0
	}
	return time.Duration(min(float64(est)*float64(size)*float64(n)/sum, math.MaxInt64/2))
}

// pauseTimes is the time each sandbox's pause takes by size, or nil when
// the plan is by rounds.
func (in *planInput) pauseTimes() []time.Duration {
	if in.rateMiB <= 0 || !slices.ContainsFunc(in.sizes, func(s int64) bool { return s > 0 }) {
		return nil
	}
	times := make([]time.Duration, len(in.sizes))
	for i, s := range in.sizes {
		if s > 0 {
			// Saturated: past the largest Duration the conversion is
			// undefined (a tiny -rate-mib gave negative times).
			ns := float64(s) / (in.rateMiB * (1 << 20)) * float64(time.Second)
			times[i] = math.MaxInt64
			if ns < math.MaxInt64 {
				times[i] = time.Duration(ns)
			}
		} else {
			times[i] = in.estimate // unknown size: the estimate
		}
	}
	return times
}

// makespan is when the last of times ends when they start longest first,
// each as soon as one of start slots is free, and of level slots once
// start of them have ended (the adaptive limit's first round at its start,
// then the level it moves to; start == level: a fixed limit).
func makespan(times []time.Duration, start, level int) time.Duration {
	sorted := slices.Clone(times)
	slices.SortFunc(sorted, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	start, level = max(start, 1), max(level, 1)
	var running []time.Duration // when each running pause ends; never more than the slots
	var now, last time.Duration
	ended := 0
	for _, t := range sorted {
		for {
			slots := level
			if ended < start {
				slots = start
			}
			if len(running) < slots {
				break
			}
			i := slices.Index(running, slices.Min(running)) // the next to end frees its slot
			now = running[i]
			running = slices.Delete(running, i, i+1)
			ended++
		}
		end := time.Duration(math.MaxInt64) // saturated: t and now are >= 0
		if now <= math.MaxInt64-t {
			end = now + t
		}
		running = append(running, end)
		last = max(last, end)
	}
	return last
}

// climbTime is the preserve time of an adaptive limit whose first round
// does not confirm the learned level above its start (its pauses took
// longer than their estimates): it climbs as a cold one does, doubling
// after each round, here up to the learned level, where the node's
// throughput stopped growing, at the mean pause. It returns the levels of
// the rounds below the level and the pauses left to rounds at it too.
func (in *planInput) climbTime() (time.Duration, []int, int) {
	var t time.Duration
	var levels []int
	left := len(in.sizes)
	for k := in.limit; k < in.level && left > 0; k = min(2*k, in.level) {
		levels = append(levels, k)
		left -= min(k, left)
		t = satdur.Add(t, in.mean)
	}
	rest := roundsAt(left, in.level, in.mean)
	return satdur.Add(t, rest), levels, left
}

// count is n with the noun in its number: "1 slot", "8 slots". The plan
// is read about one sandbox and one slot too (a -count 1, a fixed
// -concurrency 1, the drain's one-at-a-time reserve), where "1 slots"
// and "1 sandboxes" were printed.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// rounds is ceil(n / k), without n + k - 1 wrapping round.
func rounds(n, k int) int { return n/k + min(n%k, 1) }

// roundsAt is n pauses k at a time, each taking each: ceil(n/k) x each,
// by the Drainer's own rule (deadline.Work), saturated.
func roundsAt(n, k int, each time.Duration) time.Duration {
	return deadline.Work(func() int { return n }, deadline.NewEstimator(each), func() int { return k })()
}

// gateWait bounds the gate phase as the Drainer's default does
// (drain.Config.InFlightWait zero: 10 s).
const gateWait = 10 * time.Second

// phasesFor returns the Drainer's plan phases with this preserve reserve
// and the steps.
func (in *planInput) phasesFor(reserve deadline.Reserve) []deadline.Phase {
	phases := []deadline.Phase{
		{Name: drain.PhaseDrain},
		{Name: drain.PhaseGate, Max: gateWait},
		{Name: drain.PhasePreserve, Reserve: reserve},
	}
	r := learned.Rates{Steps: in.steps}
	return append(phases, r.Phases()...)
}

// budget is the server's budget at SIGTERM, now: T0 a preStop sleep
// earlier (the kubelet's sleep, which the server never sees), SIGKILL at
// SIGTERM + max(grace - sleep, 2 s), the kubelet's arithmetic. The drain's
// work starts at SIGTERM, so what the plan lays out from now is what the
// sleep leaves.
func (in *planInput) budget(grace time.Duration) (*deadline.Budget, error) {
	b, err := deadline.New(grace, in.budgetConfig())
	if err != nil {
		return nil, err
	}
	b.OnSIGTERM(time.Now())
	return b, nil
}

func (in *planInput) plan() (*planResult, error) {
	reserve, byRounds := in.preserveReserve()
	res := &planResult{reserve: reserve(), predicted: reserve(), byRounds: byRounds}
	n := len(in.sizes)
	switch {
	case !byRounds:
		if in.level != in.limit || in.unmeasured {
			res.predicted = makespan(in.pauseTimes(), in.limit, in.level)
		}
		if in.unmeasured {
			res.serial = makespan(in.pauseTimes(), 1, 1)
		}
	case in.guessed(): // the start's round at the mean, and one at a time: the two it can count
		res.predicted = roundsAt(n, in.limit, in.mean)
		res.serial = roundsAt(n, 1, in.mean)
	case in.level == in.limit || n <= in.limit: // the same rule at the mean: what the pauses will most likely take
		res.predicted = roundsAt(n, in.limit, in.mean)
	default: // a first round at the start, then the rest at the level
		rest := roundsAt(n-in.limit, in.level, in.mean)
		res.predicted = satdur.Add(in.mean, rest)
		if in.level > in.limit {
			res.climb, res.climbFrom, res.climbLeft = in.climbTime()
		}
	}
	if byRounds && in.largestAtPrior(in.estimate) > in.roundsReserve() { // the largest sandbox outlasts the rounds
		res.largest, res.predicted = true, max(res.predicted, in.largestAtPrior(in.mean))
		if res.serial > 0 {
			res.serial = max(res.serial, in.largestAtPrior(in.mean))
		}
	}
	phases := in.phasesFor(reserve)
	b, err := in.budget(in.grace)
	if err != nil {
		return nil, fmt.Errorf("-grace %v, -margin %v, -prestop-sleep %v: %w", in.grace, in.margin, in.sleep, err)
	}
	// NewPlan checks the phases (names, Max, reserves), which planNode and
	// the bisection of gracefit lay out again unchanged: once here.
	if _, err := deadline.NewPlan(b, phases...); err != nil {
		return nil, err
	}
	res.budget = b.State()
	res.windows, res.shortfall = atSIGTERM(b, phases)
	refused := in.newShortfall(in.grace, phases)
	res.fits = refused == 0
	if !res.fits && res.shortfall == 0 { // New's count, where the layout from SIGTERM shares nothing short
		res.shortfall = refused
	}
	res.spare = res.windows[0].Deadline.Sub(res.windows[0].Start) // the drain window: what is not reserved
	res.minGrace = gracefit.Smallest(in.budgetConfig(), func(*deadline.Budget) []deadline.Phase { return phases })
	if in.kubeletGrace > 0 && in.kubeletGrace < in.grace {
		if res.node, err = in.planNode(phases); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// planNode lays out phases as the server's drain does when the kubelet
// terminates the pod on its own (nodeBudget), and finds the smallest
// kubelet grace that holds them by the same arithmetic, drain.New's
// warning's (internal/gracefit).
func (in *planInput) planNode(phases []deadline.Phase) (*nodePlan, error) {
	b, err := in.nodeBudget(in.kubeletGrace)
	if err != nil {
		return nil, err
	}
	node := &nodePlan{}
	node.windows, node.shortfall = atSIGTERM(b, phases)
	node.fits = node.shortfall == 0 && in.kubeletWrong == ""
	node.minGrace = gracefit.SmallestNode(in.grace, in.budgetConfig(), func(*deadline.Budget) []deadline.Phase { return phases })
	return node, nil
}

// nodeBudget is the budget of the server's drain when the kubelet
// terminates the pod on its own with the grace kubelet
// (drain.Config.KubeletGrace, the Drainer's tightenOwn): gracefit.NodeBudget.
func (in *planInput) nodeBudget(kubelet time.Duration) (*deadline.Budget, error) {
	return gracefit.NodeBudget(in.grace, kubelet, in.budgetConfig())
}

// newShortfall is by how much phases, checked by plan's NewPlan, do not
// fit in a budget of grace, as drain.New counts it to refuse a server
// (gracefit.Shortfall, by which NewServer's refusal names the smallest
// grace too): the plan's verdict and its smallest grace are New's
// answer, not a copy of its arithmetic.
func (in *planInput) newShortfall(grace time.Duration, phases []deadline.Phase) time.Duration {
	return gracefit.Shortfall(grace, in.budgetConfig(), func(*deadline.Budget) []deadline.Phase { return phases })
}

// budgetConfig is the server's budget configuration: its margin and the
// pod's preStop sleep.
func (in *planInput) budgetConfig() deadline.Config {
	return deadline.Config{Margin: in.margin, PreStopSleep: in.sleep}
}

// atSIGTERM returns the plan's windows and its shortfall as they are at the
// budget's SIGTERM, where the drain's work starts: gracefit.AtSIGTERM.
func atSIGTERM(b *deadline.Budget, phases []deadline.Phase) ([]deadline.Window, time.Duration) {
	return gracefit.AtSIGTERM(b, phases)
}

func (res *planResult) print(w io.Writer, in *planInput) {
	n := len(in.sizes)
	fmt.Fprintf(w, "Plan for %s from %s, grace %s (%s)\n\n", count(n, "sandbox", "sandboxes"), in.source, in.grace, in.graceSrc)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  estimate of one pause\t%s\t%s\n", secs(in.estimate), in.estimateSrc)
	concurrency := strconv.Itoa(in.limit)
	if in.level != in.limit {
		concurrency = fmt.Sprintf("%d, then %d", in.limit, in.level)
	}
	fmt.Fprintf(tw, "  concurrency\t%s\t%s\n", concurrency, in.limitSrc)
	adapts := in.level != in.limit && n > in.limit
	longer := ""
	if res.largest {
		longer = "; the largest sandbox takes longer (below)"
	}
	switch {
	case in.guessed() && res.byRounds:
		fmt.Fprintf(tw, "  predicted preserve time\tnot known\tnothing measured on this node yet: %s where %d at once run as fast as one (%d round(s) of %d at %s, %s), %s where they run no faster than one at a time (%d at %s, as the drain reserves)%s; its first drain measures it\n",
			secs(res.predicted), in.limit, rounds(n, in.limit), in.limit, secs(in.mean), in.meanSrc, secs(res.serial), n, secs(in.mean), longer)
	case in.guessed():
		fmt.Fprintf(tw, "  predicted preserve time\tnot known\tnothing measured on this node yet: %s where %d at once run as fast as one (by size at %g MiB/s per pause, longest first over %s), %s where they run no faster than one at a time (one slot, as the drain reserves); its first drain measures it\n",
			secs(res.predicted), in.limit, in.rateMiB, count(in.limit, "slot", "slots"), secs(res.serial))
	case res.byRounds && adapts:
		how := ""
		if in.level < in.limit {
			how = "; a first round past the knee takes longer than the mean, which is not predicted"
		}
		fmt.Fprintf(tw, "  predicted preserve time\t%s\t1 round of %d, then %d round(s) of %d at %s, %s%s%s\n",
			secs(res.predicted), in.limit, rounds(n-in.limit, in.level), in.level, secs(in.mean), in.meanSrc, how, longer)
		if res.climb > 0 {
			from := make([]string, len(res.climbFrom))
			for i, k := range res.climbFrom {
				from[i] = strconv.Itoa(k)
			}
			then := ""
			if res.climbLeft > 0 {
				then = fmt.Sprintf(", then %d round(s) of %d", rounds(res.climbLeft, in.level), in.level)
			}
			climb := "rounds of " + strings.Join(from, ", ")
			if len(from) == 1 { // a level of 16 from 8: one round below it
				climb = "1 round of " + from[0]
			}
			fmt.Fprintf(tw, "  if it climbs instead\t%s\t%s%s at %s: when the first round is slower than its estimates\n",
				secs(res.climb), climb, then, secs(in.mean))
		}
	case res.byRounds:
		fmt.Fprintf(tw, "  predicted preserve time\t%s\t%d round(s) of %d at %s, %s%s\n",
			secs(res.predicted), rounds(n, in.limit), in.limit, secs(in.mean), in.meanSrc, longer)
	case adapts:
		fmt.Fprintf(tw, "  predicted preserve time\t%s\tby size at %g MiB/s per pause, longest first over %s, %d once %d have ended\n",
			secs(res.predicted), in.rateMiB, count(in.limit, "slot", "slots"), in.level, in.limit)
	default:
		fmt.Fprintf(tw, "  predicted preserve time\t%s\tby size at %g MiB/s per pause, longest first over %s\n",
			secs(res.predicted), in.rateMiB, count(in.limit, "slot", "slots"))
	}
	switch {
	case res.byRounds:
		rule := "ceil(sandboxes / concurrency) x estimate"
		switch {
		case in.unmeasured:
			rule = "sandboxes x estimate: nothing measured, no parallelism counted on, as the server's plan at SIGTERM"
		case in.ceiling > 0 && in.reserved < in.limit:
			rule = "ceil(sandboxes / the learned level, below the start and not yet tested) x estimate, as the server's plan at SIGTERM"
		case in.ceiling > 0:
			rule = "ceil(sandboxes / the limit at the start) x estimate, as the server's plan at SIGTERM"
		}
		atLeast := ""
		if res.largest {
			atLeast = ", and at least the largest sandbox (below)"
		}
		fmt.Fprintf(tw, "  the drain reserves\t%s\t%d round(s) of %d at the estimate %s (%s)%s\n",
			secs(res.reserve), rounds(n, in.reserved), in.reserved, secs(in.estimate), rule, atLeast)
		if res.largest {
			fmt.Fprintf(tw, "  the largest sandbox\t%s\tits size at the estimate for the average size, as the server's Preserver takes it before it has measured a rate: longer than the rounds, and the drain never reserves less (at the mean: %s)\n",
				secs(in.largestAtPrior(in.estimate)), secs(in.largestAtPrior(in.mean)))
		}
	case adapts || in.unmeasured:
		fmt.Fprintf(tw, "  the drain reserves\t%s\tby size, longest first over %s (what the server's plan counts on at SIGTERM)\n", secs(res.reserve), count(in.reserved, "slot", "slots"))
	}
	st := res.budget
	slept := ""
	if in.sleep > 0 {
		slept = fmt.Sprintf(", of which the preStop sleep takes %s before SIGTERM: %s left for the drain", secs(in.sleep), secs(st.Deadline.Sub(st.SIGTERM)))
	}
	grace := "grace " + in.grace.String()
	if kill := st.Kill.Sub(st.Start); kill != in.grace {
		// The kubelet's floor between SIGTERM and SIGKILL moved SIGKILL past the grace
		// (a grace under 2 s, a preStop sleep that leaves less): said, the figures add
		// up, where "grace 1s less a margin of 1.000s" was a budget of 1 s (row 1478).
		grace += fmt.Sprintf(", SIGKILL at +%s (the kubelet waits at least %v after SIGTERM),", secs(kill), deadline.MinimumGracePeriod)
	}
	fmt.Fprintf(tw, "  budget\t%s\t%s less a margin of %s before SIGKILL%s\n", secs(st.Deadline.Sub(st.Start)), grace, secs(st.Kill.Sub(st.Deadline)), slept)
	tw.Flush()

	fmt.Fprintf(w, "\n  The plan from T0 (deadline.Plan; steps: %s):\n", in.stepsSrc)
	if len(in.steps) == 0 {
		// The one-call path always has one: its plan is not this one.
		fmt.Fprintln(w, "  (a drain.NewServer server adds its http step, a fortieth of the grace, 250 ms to 5 s: give it with -step http=DURATION)")
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    phase\tfrom\tto\treserve\tshort\t")
	t0 := res.windows[0].Start.Add(-in.sleep) // the windows start at SIGTERM
	for _, win := range res.windows {
		note := ""
		switch win.Name {
		case drain.PhaseDrain:
			note = "spare: the preStop wait may use it"
			if in.sleep > 0 {
				note = "spare, after the preStop sleep from +0.000s"
			}
		case drain.PhasePreserve:
			note = "pausing"
		}
		for _, s := range in.steps {
			if s.Name == win.Name && s.Critical {
				note = "critical"
			}
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\n", win.Name, rel(win.Start, t0), rel(win.Deadline, t0), secs(win.Reserve), secs(win.Short), note)
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	atGrace := ""
	if in.graceFromRates { // the verdict is read alone: it says whose grace it holds for
		atGrace = ", at the grace of the last shutdown"
	}
	if res.fits {
		fmt.Fprintf(tw, "  spare\t%s\tthe work could take this much longer and still fit\n", secs(res.spare))
		fmt.Fprintf(tw, "  verdict\tFITS\tevery sandbox would be preserved%s\n", atGrace)
	} else {
		fmt.Fprintf(tw, "  shortfall\t%s\tthe work is this much longer than the budget\n", secs(res.shortfall))
		fmt.Fprintf(tw, "  verdict\tDOES NOT FIT\t%s%s\n", in.lost(res, res.windows), atGrace)
	}
	if res.minGrace > 0 {
		fmt.Fprintf(tw, "  smallest grace that fits\t%ds\tterminationGracePeriodSeconds: %d (with the step reserves as given)\n",
			int64(res.minGrace/time.Second), int64(res.minGrace/time.Second))
	} else {
		fmt.Fprintf(tw, "  smallest grace that fits\tnone\tnot even %s fits\n", gracefit.Max)
	}
	res.printNode(tw, in)
	tw.Flush()
}

// printNode writes the verdict of the kubelet's own termination (graceful
// node shutdown), or why there is none.
func (res *planResult) printNode(tw io.Writer, in *planInput) {
	const slice = "shutdownGracePeriod less shutdownGracePeriodCriticalPods in the KubeletConfiguration"
	grace := fmt.Sprintf("the kubelet's own grace, %s (%s)", in.kubeletGrace, in.kubeletSrc)
	switch node := res.node; {
	case in.kubeletGrace == 0 && in.kubeletOff != "":
		fmt.Fprintf(tw, "  node shutdown\tnot planned\t%s\n", in.kubeletOff)
	case in.kubeletGrace == 0:
		fmt.Fprintf(tw, "  node shutdown\tnot planned\tno -kubelet-grace (%s), and the server recorded none: a graceful node shutdown gives the pod only that\n", slice)
	case node == nil:
		fmt.Fprintf(tw, "  node shutdown\tas above\t%s is not shorter than the pod's\n", grace)
	case in.kubeletWrong != "":
		short := ""
		if node.shortfall > 0 && node.minGrace > 0 {
			short = fmt.Sprintf(", and the work needs %ds", int64(node.minGrace/time.Second))
		}
		fmt.Fprintf(tw, "  node shutdown\tDOES NOT FIT\tin %s, %s; set the server's -kubelet-grace (DRAINKIT_KUBELET_GRACE) to %s%s\n",
			grace, in.kubeletWrong, in.kubeletGrace, short)
	case node.fits:
		fmt.Fprintf(tw, "  node shutdown\tFITS\tin %s: every sandbox would be preserved\n", grace)
	case node.minGrace > 0 && in.kubeletRaise != nil && len(in.kubeletRaise(node.minGrace)) > 0:
		// The settings that hold the grace below what the work needs: a
		// soft eviction's, a critical pod's, a group's by priority, where
		// the slice's text named shutdownGracePeriod whatever held it.
		fmt.Fprintf(tw, "  node shutdown\tDOES NOT FIT\tin %s: %s; it needs %ds: %s in the KubeletConfiguration\n",
			grace, in.lost(res, node.windows), int64(node.minGrace/time.Second), strings.Join(in.kubeletRaise(node.minGrace), "; "))
	case node.minGrace > 0:
		fmt.Fprintf(tw, "  node shutdown\tDOES NOT FIT\tin %s: %s; it needs %ds (%s)\n",
			grace, in.lost(res, node.windows), int64(node.minGrace/time.Second), slice)
	default:
		fmt.Fprintf(tw, "  node shutdown\tDOES NOT FIT\tin %s: %s\n", grace, in.lost(res, node.windows))
	}
}

// guessed reports whether what the drain's preserve phase takes turns on
// a parallelism nothing measured: a node that never drained, whose Run
// starts limit at once at a speed no one knows (unmeasured), with more
// than one sandbox. One sandbox is one pause, however many may run at
// once: the plan predicts it, where it said "not known" beside two equal
// figures, and that a Run of 8 at once keeps more or fewer than one at a
// time.
func (in *planInput) guessed() bool { return in.unmeasured && len(in.sizes) > 1 }

// lost says how many sandboxes would not be preserved in windows
// (lostEstimate), and, on a node that measured nothing, at what speed: the
// count is at the drain's reserve, one at a time, where its Run starts
// limit at once at a speed no one measured, which keeps all on a disk that
// writes them as fast as one (drainsim: 20 of 20 where one at a time
// loses 13) and none on one that writes no more than one at full speed
// (each at a limit-th of its speed, all cut together).
func (in *planInput) lost(res *planResult, windows []deadline.Window) string {
	s := fmt.Sprintf("about %d of %s would not be preserved", in.lostEstimate(res, windows), count(len(in.sizes), "sandbox", "sandboxes"))
	if in.guessed() {
		s += fmt.Sprintf(" one at a time, as the drain reserves (nothing measured yet: its Run starts %d at once, which keep more where %d at once run faster than one, fewer where they do not)",
			in.limit, in.limit)
	}
	return s
}

// lostEstimate is how many sandboxes would not fit in the plan's windows:
// the share of them that the preserve window is short of its reserve (n x window / reserve
// kept), or, when the rounds fit but some sandboxes alone are longer than
// the window, those. It is proportional, not whole rounds: a window of 2.5
// rounds keeps about 2.5 rounds' sandboxes, as preserves of unequal length
// do (an operator's review: 13 predicted, 12 lost in a real drain).
func (in *planInput) lostEstimate(res *planResult, windows []deadline.Window) int {
	n := len(in.sizes)
	if res.reserve <= 0 || n == 0 {
		return 0
	}
	var window time.Duration
	for _, w := range windows {
		if w.Name == drain.PhasePreserve {
			window = w.Deadline.Sub(w.Start)
		}
	}
	reserve, over := res.reserve, 0
	if res.largest { // the rounds fit but for the sandboxes longer than the window
		reserve = in.roundsReserve()
		for _, s := range in.sizes {
			if in.atPrior(s, in.estimate) > window {
				over++
			}
		}
	}
	kept := int(float64(n) * window.Seconds() / reserve.Seconds())
	return max(n-kept, over, 0)
}
