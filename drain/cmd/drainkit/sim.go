package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/planat"
)

const simUsage = `usage: drainkit sim [-nodes M] [-sandboxes N|LO-HI] [-pause D] [-jitter J] [-grace SECONDS] [-max-unavailable U] [flags]

Plans past one machine: a DaemonSet rolling update over M nodes, each with
its running sandboxes, in virtual time, three ways side by side:

  seed       the server before drainkit (AgentENV's issue 413): a preStop hook
             that waits for zero running sandboxes with no bound, so it holds
             the pod for the whole grace period; the kubelet's 2 s after
             SIGTERM; then one pause at a time until SIGKILL, which also
             kills the device daemon with live devices (unless every pause
             and the daemon's stop end before it).
  drainkit   the preStop wait ends at the drain deadline the plan computes,
             SIGTERM preserves the sandboxes at the learned concurrency
             before the preserve deadline, the device teardown runs in its
             critical reserve, and the server exits before SIGKILL.
  drainkit, no preStop wait
             the same server in a manifest without the preStop hook:
             SIGTERM comes at once and the node is handed back as soon as
             its sandboxes are preserved.

The rollout replaces at most -max-unavailable pods at once (a number, or as
the DaemonSet's maxUnavailable a percentage of the nodes, rounded up: 10%);
a node is unavailable from its pod's deletion until the new pod is ready
(-startup after the old one exits). It prints the rollout's duration, the sandboxes
lost, the nodes SIGKILLed and the device daemons killed with live devices.

How it runs: a discrete-event model in virtual time, not the servers
themselves. Each node's termination is laid out with the library's own clock:
a deadline.Budget anchored at the preStop (or SIGTERM) and refined with the
kubelet's arithmetic, the Drainer's deadline.Plan for every phase's window
with its phases and reserves (deadline.Work for the preserve reserve: ceil
(sandboxes / concurrency) x estimate), and the pauses scheduled over the
concurrency slots inside the preserve window (no pause starts after its
deadline; one still running at the hard deadline is lost). The real drain,
pause and ublk code under testing/synctest is what
examples/drainsim's TestFullScaleInVirtualTime runs, one node at a time.

Sandboxes never finish on their own here (their timeouts outlast the grace
period, as in the seed report): a preStop wait ends early only on a node
with none running, at its first count; pause times are uniform in
pause x [1-jitter, 1+jitter], drawn per sandbox from -seed.

Exit status: 0 when the simulation ran, whatever it found (sandboxes lost,
nodes SIGKILLed: a model's answer, not a verdict on a real rollout; drainkit
plan gates one), 2 for bad flags or arguments, or output that cannot be
written.

Examples:

	drainkit sim                                   # 100 nodes x 200 sandboxes, grace 3600 s
	drainkit sim -nodes 500 -sandboxes 50-300 -max-unavailable 10
	drainkit sim -grace 600 -pause 5s -jitter 0.8 -concurrency 4
`

// simConfig is the fleet and the servers' settings.
type simConfig struct {
	nodes          int
	minSB, maxSB   int
	pause          time.Duration
	jitter         float64
	estimate       time.Duration // the learned estimate; 0: the p90 of the distribution
	concurrency    int
	grace          time.Duration
	maxUnavailable int
	unavailablePct int // -max-unavailable as a percentage of the nodes; 0: given as a number
	startup        time.Duration
	teardown       time.Duration // how long the device teardown takes
	seed           uint64
}

// countFlag is N or LO-HI.
type countFlag struct{ lo, hi int }

func (c *countFlag) String() string {
	if c.lo == c.hi {
		return strconv.Itoa(c.lo)
	}
	return fmt.Sprintf("%d-%d", c.lo, c.hi)
}

func (c *countFlag) Set(v string) error {
	lo, hi, ranged := strings.Cut(v, "-")
	a, err1 := strconv.Atoi(lo)
	b, err2 := a, error(nil)
	if ranged {
		b, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a < 0 || b < a {
		return fmt.Errorf("want N or LO-HI with 0 <= LO <= HI, got %q", v)
	}
	c.lo, c.hi = a, b
	return nil
}

// unavailableFlag is N or P%, as the DaemonSet's
// rollingUpdate.maxUnavailable (an IntOrString) takes it: a percentage of
// the nodes, rounded up. isPct says which: a negative n is a number given
// (named by check), not a mark of a percentage, which read "-1" as "0%".
type unavailableFlag struct {
	n, pct int
	isPct  bool
}

func (u *unavailableFlag) String() string {
	if u.isPct {
		return strconv.Itoa(u.pct) + "%"
	}
	return strconv.Itoa(u.n)
}

func (u *unavailableFlag) Set(v string) error {
	num, pct := strings.CutSuffix(v, "%")
	n, err := strconv.Atoi(num)
	if err != nil || pct && (n < 0 || n > 100) {
		return fmt.Errorf("want a number, or a whole percentage from 0%% to 100%%, got %q", v)
	}
	*u = unavailableFlag{n: n}
	if pct {
		*u = unavailableFlag{pct: n, isPct: true} // resolved against the nodes
	}
	return nil
}

func runSim(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sim", simUsage, stdout)
	var c simConfig
	fs.IntVar(&c.nodes, "nodes", 100, "nodes in the fleet (`M`)")
	counts := countFlag{200, 200}
	fs.Var(&counts, "sandboxes", "running sandboxes per node, `N` or LO-HI (uniform)")
	durflag.DurationVar(fs, &c.pause, "pause", 2*time.Second, "median time of one pause")
	fs.Float64Var(&c.jitter, "jitter", 0.5, "pause times are uniform in pause x [1-J, 1+J]")
	durflag.DurationVar(fs, &c.estimate, "estimate", 0, "the estimate the servers learned (default: the p90 of the pause times)")
	fs.IntVar(&c.concurrency, "concurrency", 8, "pauses at once on a drainkit node")
	durflag.GraceVar(fs, &c.grace, "grace", 3600*time.Second, "terminationGracePeriodSeconds, in `SECONDS` or as a duration")
	unavailable := unavailableFlag{n: 1}
	fs.Var(&unavailable, "max-unavailable", "the DaemonSet's rollingUpdate.maxUnavailable: `U` nodes, or a percentage of them (rounded up)")
	durflag.DurationVar(fs, &c.startup, "startup", 30*time.Second, "from the old pod's exit until the new pod is ready")
	durflag.DurationVar(fs, &c.teardown, "teardown", time.Second, "how long the device teardown takes")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed of the pause times and counts")
	pos, err := parse(fs, args)
	c.minSB, c.maxSB = counts.lo, counts.hi
	c.maxUnavailable, c.unavailablePct = unavailable.n, unavailable.pct
	if err == nil && unavailable.isPct {
		err = c.resolveUnavailable()
	}
	if err == nil {
		err = c.check(pos)
	}
	if err != nil {
		return usageError(stderr, "sim", err)
	}
	res := []fleetResult{c.rollout(modeSeed), c.rollout(modeDrainkit), c.rollout(modeNoWait)}
	var out bytes.Buffer
	c.print(&out, res)
	if _, err := stdout.Write(trimLines(out.Bytes())); err != nil {
		fmt.Fprintf(stderr, "drainkit sim: %v\n", err)
		return exitUsage
	}
	return exitOK
}

// resolveUnavailable turns -max-unavailable P% into nodes: P% of them,
// rounded up, as the DaemonSet controller does; 0% is no node at all.
func (c *simConfig) resolveUnavailable() error {
	if c.nodes < 1 || c.nodes > 100000 {
		return nil // check names -nodes
	}
	c.maxUnavailable = (c.unavailablePct*c.nodes + 99) / 100
	if c.maxUnavailable < 1 {
		return fmt.Errorf("-max-unavailable %d%% is 0 of %d nodes: want at least 1", c.unavailablePct, c.nodes)
	}
	return nil
}

func (c *simConfig) check(pos []string) error {
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected arguments %q", pos)
	case c.nodes < 1 || c.nodes > 100000:
		return fmt.Errorf("-nodes must be in [1, 100000], got %d", c.nodes)
	case c.maxSB > 100000:
		return fmt.Errorf("-sandboxes must be at most 100000 per node, got %d", c.maxSB)
	case c.nodes*c.maxSB > maxSimSandboxes:
		return fmt.Errorf("-nodes %d x -sandboxes %d is up to %d sandboxes to simulate: at most %d (about 20 s on one core; "+
			"10 times fewer nodes tell the same per node)", c.nodes, c.maxSB, c.nodes*c.maxSB, maxSimSandboxes)
	case c.pause <= 0:
		return fmt.Errorf("-pause must be positive, got %v", c.pause)
	case !(c.jitter >= 0 && c.jitter < 1):
		return fmt.Errorf("-jitter must be in [0, 1), got %v", c.jitter)
	case c.estimate < 0:
		return fmt.Errorf("-estimate must not be negative, got %v", c.estimate)
	case c.concurrency < 1:
		return fmt.Errorf("-concurrency must be at least 1, got %d", c.concurrency)
	case c.maxUnavailable < 1:
		return fmt.Errorf("-max-unavailable must be at least 1, got %d", c.maxUnavailable)
	case c.startup < 0 || c.teardown < 0:
		return fmt.Errorf("-startup and -teardown must not be negative")
	}
	return nil
}

// maxSimSandboxes bounds the sandboxes a sim lays out, over every node:
// each is three pauses of the model (one per way), about 60 ns each, so
// the largest flags (100000 nodes of 100000) would run for half an hour
// with nothing said; 10^8 takes about 20 s.
const maxSimSandboxes = 100_000_000

// The ways a node is terminated.
const (
	modeSeed = iota
	modeDrainkit
	modeNoWait
)

var modeNames = []string{"seed", "drainkit", "drainkit, no preStop wait"}

// nodeResult is one node's termination.
type nodeResult struct {
	sandboxes, lost int
	took            time.Duration // from deletion (T0) to the process's end
	killed          bool          // SIGKILL came first
	liveDevices     bool          // the device daemon did not stop before the end
	headroom        time.Duration // SIGKILL minus the end (drainkit)
}

// fleetResult is the rollout's.
type fleetResult struct {
	mode                int
	duration            time.Duration
	sandboxes, lost     int
	killed, liveDevices int
	tookP50, tookMax    time.Duration
	minHeadroom         time.Duration
}

// epoch is virtual time's origin; only differences are printed.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rollout terminates every node in order, at most maxUnavailable at once,
// and returns the fleet's account. Every mode sees the same nodes: the same
// counts and pause times, from the same seed.
func (c *simConfig) rollout(mode int) fleetResult {
	rng := rand.New(rand.NewPCG(c.seed, c.seed^0x9e3779b97f4a7c15))
	lanes := make([]time.Duration, min(c.maxUnavailable, c.nodes)) // when each slot of the rollout frees; more than the nodes is all at once
	res := fleetResult{mode: mode, minHeadroom: math.MaxInt64}
	var took []time.Duration
	for range c.nodes {
		n := c.minSB + rng.IntN(c.maxSB-c.minSB+1)
		times := make([]time.Duration, n)
		for i := range times {
			f := 1 + c.jitter*(2*rng.Float64()-1)
			times[i] = time.Duration(float64(c.pause) * f)
		}
		var r nodeResult
		switch mode {
		case modeSeed:
			r = c.seedNode(times)
		default:
			r = c.drainkitNode(times, mode == modeDrainkit)
		}
		i := slices.Index(lanes, slices.Min(lanes))
		lanes[i] += r.took + c.startup
		res.sandboxes += r.sandboxes
		res.lost += r.lost
		if r.killed {
			res.killed++
		}
		if r.liveDevices {
			res.liveDevices++
		}
		res.minHeadroom = min(res.minHeadroom, r.headroom)
		took = append(took, r.took)
	}
	res.duration = slices.Max(lanes)
	slices.Sort(took)
	res.tookP50, res.tookMax = took[(len(took)-1)/2], took[len(took)-1]
	return res
}

// seedNode: the preStop loop holds the pod for the whole grace period (the
// sandboxes never reach zero; with none running, its first count ends
// it), SIGTERM then leaves the kubelet's 2 s, and the server pauses one
// sandbox at a time until SIGKILL; if every pause ends before it, the
// server stops the device daemon and exits (examples/drainsim's seed).
func (c *simConfig) seedNode(times []time.Duration) nodeResult {
	b := c.budget()
	t0 := epoch
	b.OnPreStop(t0)
	sigterm := b.Kill() // the hook overran the grace period
	if len(times) == 0 {
		sigterm = t0
	}
	b.OnSIGTERM(sigterm)
	kill := b.Kill()
	now, preserved := sigterm, 0
	for _, d := range times {
		if now.Add(d).After(kill) {
			break
		}
		now = now.Add(d)
		preserved++
	}
	r := nodeResult{sandboxes: len(times), lost: len(times) - preserved, took: kill.Sub(t0), killed: true, liveDevices: true}
	if end := now.Add(c.teardown); preserved == len(times) && !end.After(kill) {
		r.took, r.killed, r.liveDevices = end.Sub(t0), false, false
	}
	r.headroom = kill.Sub(t0) - r.took
	return r
}

func (c *simConfig) budget() *deadline.Budget {
	b, err := deadline.New(c.grace, deadline.Config{})
	if err != nil {
		panic(err) // grace is positive: checked
	}
	return b
}

// estimator is the servers' learned estimate of one pause.
func (c *simConfig) estimator() *deadline.Estimator {
	if c.estimate > 0 {
		return deadline.NewEstimator(c.estimate)
	}
	return deadline.NewEstimator(time.Duration(float64(c.pause) * (1 + 0.8*c.jitter))) // p90 of the uniform
}

// phases are the Drainer's plan for running sandboxes: the drain wait, the
// gate, the preserve phase, the critical device teardown and the server's
// exit, with the supervisor's step reserves.
func (c *simConfig) phases(running *int) []deadline.Phase {
	step := min(max(c.grace/10, 500*time.Millisecond), 30*time.Second)
	return []deadline.Phase{
		{Name: drain.PhaseDrain},
		{Name: drain.PhaseGate, Max: gateWait},
		{Name: drain.PhasePreserve, Reserve: deadline.Work(func() int { return *running }, c.estimator(), func() int { return c.concurrency })},
		{Name: "server", Reserve: deadline.Fixed(step)},
		{Name: "ublk", Reserve: deadline.Fixed(step), Critical: true},
	}
}

// drainkitNode lays the termination out with the library's clock: the
// budget, anchored at the preStop (or at SIGTERM without one) and refined
// at SIGTERM with the kubelet's arithmetic; every window from the Drainer's
// deadline.Plan over its phases, asked when the phase starts, at that
// instant of virtual time (internal/planat).
func (c *simConfig) drainkitNode(times []time.Duration, preStop bool) nodeResult {
	b := c.budget()
	running := len(times)
	plan, err := deadline.NewPlan(b, c.phases(&running)...)
	if err != nil {
		panic(err) // the phases are fixed and their reserves not negative
	}
	window := func(at time.Time, name string) deadline.Window {
		return planat.Windows(plan, at, name).([]deadline.Window)[0]
	}
	t0 := epoch
	sigterm := t0
	if preStop {
		b.OnPreStop(t0)
	}
	if preStop && running > 0 {
		// The sandboxes never finish on their own: the wait ends at the
		// drain deadline (with none running, at its first count), and the
		// kubelet sends SIGTERM when the hook returns.
		sigterm = window(t0, drain.PhaseDrain).Deadline
	}
	b.OnSIGTERM(sigterm)
	// The gate is instant (no admitted operation in flight); the preserve
	// phase asks for its window as it starts.
	w := window(sigterm, drain.PhasePreserve)
	end, lost := schedule(times, c.concurrency, sigterm, w.Deadline, w.Hard)
	running = 0
	// The server's exit, then the device teardown, each in its window.
	srv := window(end, "server")
	end = laterTime(end, srv.Start)
	td := window(end, "ublk")
	live := false
	if fin := end.Add(c.teardown); fin.After(td.Deadline) {
		end, live = td.Deadline, true
	} else {
		end = fin
	}
	kill := b.Kill()
	return nodeResult{sandboxes: len(times), lost: lost, took: end.Sub(t0), killed: end.After(kill),
		liveDevices: live || end.After(kill), headroom: kill.Sub(end)}
}

func laterTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// schedule runs the pauses, in order, over slots slots from start: none
// starts at or after dl, and one still running at hard is lost. It returns
// when the last pause ended (or hard) and how many sandboxes were lost.
func schedule(times []time.Duration, slots int, start, dl, hard time.Time) (time.Time, int) {
	free := make([]time.Time, max(min(slots, len(times)), 1)) // more slots than pauses: idle ones
	for i := range free {
		free[i] = start
	}
	end, lost := start, 0
	for _, d := range times {
		i := 0
		for j := range free {
			if free[j].Before(free[i]) {
				i = j
			}
		}
		at := free[i]
		if !at.Before(dl) { // no slot before the deadline: neither this one nor any later
			lost++
			continue
		}
		fin := at.Add(d)
		if fin.After(hard) {
			lost++
			fin = hard
		}
		free[i] = fin
		end = laterTime(end, fin)
	}
	return end, lost
}

func (c *simConfig) print(w io.Writer, res []fleetResult) {
	sb := strconv.Itoa(c.minSB)
	if c.maxSB != c.minSB {
		sb = fmt.Sprintf("%d-%d (uniform)", c.minSB, c.maxSB)
	}
	est := c.estimator().Estimate()
	unavailable := strconv.Itoa(c.maxUnavailable)
	if c.unavailablePct > 0 {
		unavailable += fmt.Sprintf(" (%d%% of %d nodes)", c.unavailablePct, c.nodes)
	}
	fmt.Fprintf(w, "Fleet: %d nodes x %s sandboxes, pauses %s-%s (uniform), grace %s, maxUnavailable %s,\n",
		c.nodes, sb, secs(time.Duration(float64(c.pause)*(1-c.jitter))), secs(time.Duration(float64(c.pause)*(1+c.jitter))),
		c.grace, unavailable)
	fmt.Fprintf(w, "new pod ready %s after the old one exits; drainkit: %d pauses at once, estimate %s, device teardown %s.\n",
		c.startup, c.concurrency, secs(est), secs(c.teardown))
	fmt.Fprintf(w, "Virtual time, seed %d (a discrete-event model on deadline.Budget and deadline.Split; see -h).\n\n", c.seed)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprint(tw, "\t")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t", modeNames[r.mode])
	}
	fmt.Fprintln(tw)
	row := func(name string, f func(fleetResult) string) {
		fmt.Fprintf(tw, "%s\t", name)
		for _, r := range res {
			fmt.Fprintf(tw, "%s\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("rollout duration", func(r fleetResult) string { return human(r.duration) })
	row("sandboxes lost", func(r fleetResult) string {
		return fmt.Sprintf("%d of %d (%.1f %%)", r.lost, r.sandboxes, 100*float64(r.lost)/float64(max(r.sandboxes, 1)))
	})
	row("nodes SIGKILLed", func(r fleetResult) string { return strconv.Itoa(r.killed) })
	row("daemons killed with live devices", func(r fleetResult) string { return strconv.Itoa(r.liveDevices) })
	row("node termination, median", func(r fleetResult) string { return human(r.tookP50) })
	row("node termination, longest", func(r fleetResult) string { return human(r.tookMax) })
	row("least headroom before SIGKILL", func(r fleetResult) string {
		if r.mode == modeSeed && r.killed > 0 {
			return "none: SIGKILLed"
		}
		return secs(r.minHeadroom)
	})
	tw.Flush()
}

// human formats d as 1h02m03s, 4m05s or 6.5s.
func human(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm%02ds", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}
