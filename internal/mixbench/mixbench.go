package mixbench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// Sweep is the fixed limits a comparison tries: 1 (the seed's one at a
// time), pause's default start (8) among them, and up to its default
// ceiling (32).
var Sweep = []int{1, 2, 4, 8, 16, 32}

// A Result is one Run of a mix.
type Result struct {
	Limit      int           // the fixed limit; 0 for the adaptive default
	Took       time.Duration // the Run's wall time
	Bytes      int64         // bytes preserved (sizes of the Sized sandboxes)
	Count      int           // sandboxes preserved
	Throughput float64       // bytes (or sandboxes, when unsized) per second, by Little's law
	FinalLimit int           // the limit at the end of the Run
	Learned    int           // the limit the Run learned (pause.Report.LearnedLimit); 0: none
	Estimate   time.Duration // the Preserver's Estimator's estimate of one preserve at the end
}

// MaxLimit is the ceiling a Run started from a learned limit adapts under:
// pause's default.
const MaxLimit = 32

// FromLearned returns cfg for a later drain on the same node as the Run
// that gave res: a Preserver as a server makes one from what that drain
// learned (internal/learned), its Estimator starting from res's estimate
// and its limit from the limit res learned, adapting under MaxLimit (cfg
// as it is, with its Estimator, when res learned none).
func FromLearned(cfg pause.Config, res Result) pause.Config {
	if res.Learned == 0 {
		return cfg
	}
	cfg.Limit, cfg.MaxLimit = res.Learned, max(cfg.MaxLimit, MaxLimit)
	cfg.Estimator = deadline.NewEstimator(res.Estimate)
	return cfg
}

// Run preserves sbs with a new Preserver made with cfg (without progress
// lines), with no deadline, and fails unless every one is preserved.
func Run(ctx context.Context, sbs []pause.Sandbox, cfg pause.Config) (Result, error) {
	cfg.ProgressInterval = -1
	listed := false // then none: they are preserved, and a Lister lists what still needs it
	p, err := pause.New(pause.ListFunc(func(context.Context) ([]pause.Sandbox, error) {
		if listed {
			return nil, nil
		}
		listed = true
		return sbs, nil
	}), cfg)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	rep := p.Run(ctx, time.Time{})
	took := time.Since(start)
	if n := rep.Counts[pause.Preserved]; n != len(sbs) {
		return Result{}, fmt.Errorf("mixbench: preserved %d of %d (%v)", n, len(sbs), rep.Counts)
	}
	res := Result{Took: took, FinalLimit: p.Limit(), Throughput: Throughput(rep.Entries), Count: len(sbs),
		Learned: rep.LearnedLimit, Estimate: p.Estimator().Estimate()}
	for _, e := range rep.Entries {
		res.Bytes += e.Size
	}
	return res, nil
}

// Throughput returns the bytes per second the entries moved, by Little's
// law: Σ k̄·b / Σ d, where k̄ is the average number of preserves running
// during one. Unsized entries count one unit each.
func Throughput(entries []pause.Entry) float64 {
	type event struct {
		at    time.Time
		delta int
	}
	events := make([]event, 0, 2*len(entries))
	for _, e := range entries {
		if e.Duration > 0 {
			events = append(events, event{e.Start, 1}, event{e.End, -1})
		}
	}
	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	// area(t): the integral of the in-flight count up to t, at each event.
	times := make([]time.Time, len(events))
	area := make([]float64, len(events))
	running, acc := 0, 0.0
	for i, ev := range events {
		if i > 0 {
			acc += float64(running) * float64(ev.at.Sub(events[i-1].at))
		}
		times[i], area[i] = ev.at, acc
		running += ev.delta
	}
	at := func(t time.Time) float64 {
		i, _ := slices.BinarySearchFunc(times, t, func(a, b time.Time) int { return a.Compare(b) })
		return area[min(i, len(area)-1)]
	}
	var work, took float64
	for _, e := range entries {
		if e.Duration <= 0 {
			continue
		}
		b := float64(e.Size)
		if b == 0 {
			b = 1
		}
		kbar := (at(e.End) - at(e.Start)) / float64(e.Duration)
		work += kbar * b
		took += float64(e.Duration)
	}
	if took == 0 {
		return 0
	}
	return work / took * float64(time.Second)
}

// A Comparison is the adaptive default and every fixed limit of a sweep,
// run on the same mix, summed over rounds.
type Comparison struct {
	Adaptive Result // cold: the node's first drain
	// Learned is the adaptive limit started from what the Adaptive Run
	// before it learned (FromLearned): a later drain on the same node.
	Learned Result
	Fixed   []Result // in sweep order
	Rounds  int
}

// Compare runs the mix made by mk, reset before every Run (untimed), with
// the adaptive default (cfg as it is), right after it the adaptive limit
// from what that Run learned (FromLearned), and each fixed limit of sweep
// (cfg with that Limit), rounds times, and sums the results. Round i starts
// at the (first+i)-th of [adaptive and learned, sweep...] and wraps around,
// so that no Run always comes first (a cold cache or a busy neighbour
// favours no one).
func Compare(ctx context.Context, rounds, first int, mk func() ([]pause.Sandbox, error), reset func() error, sweep []int, cfg pause.Config) (Comparison, error) {
	c := Comparison{Fixed: make([]Result, len(sweep)), Rounds: rounds}
	one := func(into *Result, limit int, o pause.Config) (Result, error) {
		if err := reset(); err != nil {
			return Result{}, err
		}
		sbs, err := mk()
		if err != nil {
			return Result{}, err
		}
		if limit > 0 {
			o.Limit = limit
		}
		res, err := Run(ctx, sbs, o)
		if err != nil {
			return Result{}, fmt.Errorf("limit %d: %w", limit, err)
		}
		into.Limit, into.FinalLimit, into.Bytes, into.Count = limit, res.FinalLimit, res.Bytes, res.Count
		into.Learned, into.Estimate = res.Learned, res.Estimate
		into.Took += res.Took
		into.Throughput += res.Throughput / float64(rounds)
		return res, nil
	}
	for round := range rounds {
		for j := range len(sweep) + 1 {
			i := (first + round + j) % (len(sweep) + 1)
			var err error
			if i == 0 {
				var cold Result
				if cold, err = one(&c.Adaptive, 0, cfg); err == nil {
					_, err = one(&c.Learned, 0, FromLearned(cfg, cold))
				}
			} else {
				_, err = one(&c.Fixed[i-1], sweep[i-1], cfg)
			}
			if err != nil {
				return c, err
			}
		}
	}
	return c, reset()
}

// Add adds the Runs of o (the same mix and sweep) to c.
func (c *Comparison) Add(o Comparison) {
	if c.Rounds == 0 {
		*c = o
		c.Fixed = slices.Clone(o.Fixed)
		return
	}
	w := float64(c.Rounds) / float64(c.Rounds+o.Rounds)
	add := func(into *Result, r Result) {
		into.Took += r.Took
		into.Throughput = w*into.Throughput + (1-w)*r.Throughput
		into.FinalLimit, into.Learned, into.Estimate = r.FinalLimit, r.Learned, r.Estimate
	}
	add(&c.Adaptive, o.Adaptive)
	add(&c.Learned, o.Learned)
	for i := range c.Fixed {
		add(&c.Fixed[i], o.Fixed[i])
	}
	c.Rounds += o.Rounds
}

// Best returns the fixed limit that took least: the best in hindsight.
func (c Comparison) Best() Result {
	return slices.MinFunc(c.Fixed, func(a, b Result) int { return int(a.Took - b.Took) })
}

func (c Comparison) fixed(limit int) (Result, bool) {
	i := slices.IndexFunc(c.Fixed, func(r Result) bool { return r.Limit == limit })
	if i < 0 {
		return Result{}, false
	}
	return c.Fixed[i], true
}

// Physical returns the physical limit of one Run: its bytes over the
// throughput measured at the best fixed limit.
func (c Comparison) Physical() time.Duration {
	best := c.Best()
	if best.Throughput == 0 {
		return 0
	}
	units := float64(best.Bytes)
	if units == 0 {
		units = float64(best.Count)
	}
	return time.Duration(units / best.Throughput * float64(time.Second))
}

// Report reports the comparison as metrics of b, named after the mix:
// x-best-fixed-MIX (adaptive time / best fixed time), x-physical-MIX
// (adaptive time / physical limit), x-seed-MIX and x-default-MIX (limit 1
// and pause's default start over the adaptive time: how much the adaptive one
// saves), best-fixed-limit-MIX, adaptive-final-limit-MIX, and the seconds
// of each Run; for the Runs from what the adaptive one learned (a later
// drain on the same node), x-best-fixed-MIX-learned, x-physical-MIX-learned,
// adaptive-learned-limit-MIX (the limit the last adaptive Run learned, that
// the learned Run of its round started from; 0: none) and
// s-adaptive-learned-MIX.
func (c Comparison) Report(b *testing.B, mix string) {
	n := float64(c.Rounds)
	ad := float64(c.Adaptive.Took) / n
	best := c.Best()
	b.ReportMetric(float64(c.Adaptive.Took)/float64(best.Took), "x-best-fixed-"+mix)
	if phys := c.Physical(); phys > 0 {
		b.ReportMetric(ad/float64(phys), "x-physical-"+mix)
	}
	if seed, ok := c.fixed(1); ok {
		b.ReportMetric(float64(seed.Took)/float64(c.Adaptive.Took), "seed/adaptive-"+mix)
	}
	if def, ok := c.fixed(defaultLimit()); ok {
		b.ReportMetric(float64(def.Took)/float64(c.Adaptive.Took), "default-fixed/adaptive-"+mix)
	}
	b.ReportMetric(float64(best.Limit), "best-fixed-limit-"+mix)
	b.ReportMetric(float64(c.Adaptive.FinalLimit), "adaptive-final-limit-"+mix)
	b.ReportMetric(ad/1e9, "s-adaptive-"+mix)
	if c.Learned.Took > 0 {
		b.ReportMetric(float64(c.Learned.Took)/float64(best.Took), "x-best-fixed-"+mix+"-learned")
		if phys := c.Physical(); phys > 0 {
			b.ReportMetric(float64(c.Learned.Took)/n/float64(phys), "x-physical-"+mix+"-learned")
		}
		b.ReportMetric(float64(c.Adaptive.Learned), "adaptive-learned-limit-"+mix)
		b.ReportMetric(float64(c.Learned.Took)/n/1e9, "s-adaptive-learned-"+mix)
	}
	for _, r := range c.Fixed {
		b.ReportMetric(float64(r.Took)/n/1e9, fmt.Sprintf("s-fixed-%d-%s", r.Limit, mix))
	}
}

// defaultLimit returns where pause's adaptive limit starts by default
// (learned.StartLimit). Not Preserver.Limit, which says what a reserve may
// count on (1 until a Run has measured a preserve).
func defaultLimit() int {
	start, err := learned.StartLimit(pause.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	return start
}
