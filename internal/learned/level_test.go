package learned_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/draintest"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/pause"
)

// A node whose sandboxes pause to one disk: each writes a GiB, alone in
// one second, and the disk writes knee of them at full speed at once,
// more sharing its bandwidth (draintest.Disk). The sandboxes are not
// Sized: the plan counts them with the Estimator's estimate of one pause,
// as drainsim's sandboxd's are.
type diskNode struct {
	knee int
	node *draintest.Node
}

const gib = 1 << 30

func newDiskNode(knee, n int) *diskNode { return newNoisyNode(knee, n, 0, 0) }

// newNoisyNode is a diskNode whose disk is noisy: each pause takes
// exp(jitter x N(0,1)) times as long (draintest.Disk.Jitter), drawn from
// seed.
func newNoisyNode(knee, n int, jitter float64, seed uint64) *diskNode {
	disk := &draintest.Disk{Bandwidth: float64(knee) * gib, PerWriter: gib, Jitter: jitter, Seed: seed}
	node := draintest.NewNode()
	for i := range n {
		node.Add(&draintest.Sandbox{Name: fmt.Sprintf("sb-%d", i), Bytes: gib, Disk: disk})
	}
	return &diskNode{knee: knee, node: node}
}

// List lists the node's running sandboxes as plain pause.Sandboxes: not
// Sized, so the plan's reserve is rounds at the Estimator's estimate.
func (n *diskNode) List(ctx context.Context) ([]pause.Sandbox, error) {
	sbs, err := n.node.List(ctx)
	out := make([]pause.Sandbox, len(sbs))
	for i, s := range sbs {
		out[i] = plain{s}
	}
	return out, err
}

type plain struct{ sb pause.Sandbox }

func (p plain) ID() string                         { return p.sb.ID() }
func (p plain) Preserve(ctx context.Context) error { return p.sb.Preserve(ctx) }

// alone is how long one pause takes on a diskNode with k in flight: the
// disk model's time.
func (n *diskNode) alone(k int) time.Duration {
	return time.Duration(float64(time.Second) * float64(max(k, n.knee)) / float64(n.knee))
}

// terminate drains srv's node as the kubelet does: the preStop call at
// T0, SIGTERM when it returns (Shutdown), SIGKILL at T0 + grace. It
// returns the preStop wait and the drain's Report, saved to srv.Dir.
func terminate(t *testing.T, srv learned.Server, lister pause.Lister, grace time.Duration) (time.Duration, *drain.Report) {
	t.Helper()
	budget, err := deadline.New(grace, deadline.Config{Margin: 2 * time.Second})
	require.NoError(t, err)
	start := srv.Start()
	steps := []drain.Step{drain.NewStep(deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(time.Second), Critical: true},
		func(context.Context) (any, error) { return nil, nil })}
	d, err := drain.New(drain.Config{Budget: budget, Sandboxes: lister, Pause: start.Config(), Steps: steps})
	require.NoError(t, err)
	t0 := time.Now()
	rec := httptest.NewRecorder()
	d.PreStop().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/drain", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	wait := time.Since(t0)
	rep := d.Shutdown(context.Background())
	start.Save(rep, budget, steps)
	return wait, rep
}

// learnOn drains node once, cold, with a grace
// long enough for the adaptive limit to climb and compare levels, and
// returns the rates it saved in dir and the drain's preserve Report.
func learnOn(t *testing.T, dir string, node *diskNode) (*learned.Rates, *pause.Report) {
	t.Helper()
	knee := node.knee
	_, rep := terminate(t, learned.Server{Dir: dir, Prior: 3 * time.Second}, node, 200*time.Second)
	require.NoError(t, rep.Err())
	r, err := learned.Read(filepath.Join(dir, learned.File))
	require.NoError(t, err)
	require.Positive(t, r.LearnedLimit, "knee %d: the first drain learned a level (%d preserved)", knee, rep.Preserve.Counts[pause.Preserved])
	return r, rep.Preserve
}

// The estimate saved with a learned level is a pause's time at that level,
// not the whole drain's. A first drain of 40 pauses on a disk that writes
// 4 at full speed climbs from 8 to 16 and learns a level (8 or 16, as the
// noise-free disk makes them equal); its Estimator's estimate is over
// pauses at 8, at 16 (twice as long) and the tail's nearly alone. Before,
// the level was saved with that estimate: 4 s at level 8 (a pause at 16),
// where a pause at 8 takes 2 s, and the next drain's plan reserved its
// rounds of 8 at twice what they take. The estimate saved now is within
// a tenth above the disk model's time at the level (the climber's payFrac,
// 5 %, by which a pause beside more counts longer, and the disk's chunks:
// each is written at the rate of the writers at its start, so a pause
// whose chunk started beside 16 wrote it at 16's speed after some ended),
// and never below it.
func TestLearnedLevelIsSavedWithTheEstimateMeasuredAtIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const knee, n = 4, 40
		r, rep := learnOn(t, t.TempDir(), newDiskNode(knee, n))
		disk := newDiskNode(knee, 0)
		at := disk.alone(r.LearnedLimit)
		t.Logf("learned %d, limit at the end %d; saved estimate %v at the level, the whole drain's %v (mean %v, p90 %v); the disk's time at the level %v",
			r.LearnedLimit, rep.Limit, r.LearnedEstimate, r.Estimate, r.Mean, r.P90, at)
		require.Greater(t, r.Estimate, at*11/10, "the whole drain ran past the level: its estimate is longer than a pause at the level")
		assert.GreaterOrEqual(t, r.LearnedEstimate, at, "never shorter than a pause at the level")
		assert.LessOrEqual(t, r.LearnedEstimate, at*11/10, "a pause at the level; the whole drain's was %v", r.Estimate)
	})
}

// What the estimate at the level is for: the next drain's plan reserves
// rounds of the level at it. On disks with knees 1, 2, 4 and 8, a first
// drain learns a level, and a second drain of 40 on the same state
// directory, with a grace that binds (the preStop wait ends at the plan's
// deadline, and the pauses fill most of what is left), preserves every
// sandbox, on a noise-free disk and on noisy ones (each pause exp(0.3 x
// N(0,1)) times as long, four seeds). Its preStop wait ends later than a
// plan from the whole drain's estimate (the rule before) would end it
// wherever the estimate at the level is the shorter: always on the
// noise-free disk, where the first drain learned 8 and ran 16 at once.
// Were the estimate shorter than a pause at the level, the rounds would
// overrun the preserve phase and lose sandboxes. A level above the start
// (16, learned in the noise) measures longer than the drain's mix, and the
// plan, which counts rounds of the start until the first epoch tests the
// level, then ends the wait earlier than before: conservative, never
// short.
func TestNextDrainPlannedAtTheLevelsEstimateKeepsEverySandbox(t *testing.T) {
	const n = 40
	type tcase struct {
		knee   int
		jitter float64
		seed   uint64
	}
	cases := []tcase{{1, 0, 1}, {2, 0, 1}, {4, 0, 1}, {8, 0, 1}}
	for _, k := range []int{1, 2, 4, 8} {
		for seed := range uint64(4) {
			cases = append(cases, tcase{k, 0.3, seed + 1})
		}
	}
	for _, tc := range cases {
		knee := tc.knee
		t.Run(fmt.Sprintf("knee %d jitter %v seed %d", knee, tc.jitter, tc.seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				r, _ := learnOn(t, dir, newNoisyNode(knee, n, tc.jitter, tc.seed))
				// The grace the old estimate's plan needs, and a little more:
				// margin, the step, the rounds at the old estimate.
				rounds := time.Duration((n + min(r.LearnedLimit, 8) - 1) / min(r.LearnedLimit, 8))
				grace := 2*time.Second + time.Second + rounds*r.Estimate + 2*time.Second

				before := *r
				before.LearnedEstimate = r.Estimate // the whole drain's, as FromReport saved it before
				old := t.TempDir()
				require.NoError(t, before.Write(filepath.Join(old, learned.File)))
				oldWait, oldRep := terminate(t, learned.Server{Dir: old, Prior: time.Second}, newNoisyNode(knee, n, tc.jitter, tc.seed+100), grace)

				wait, rep := terminate(t, learned.Server{Dir: dir, Prior: time.Second}, newNoisyNode(knee, n, tc.jitter, tc.seed+100), grace)
				pre := rep.Phase(drain.PhasePreserve)
				t.Logf("level %d at %v (the whole drain's %v): preStop wait %v (%v from the whole drain's), preserve phase %v, %d/%d, headroom %v",
					r.LearnedLimit, r.LearnedEstimate, r.Estimate, wait, oldWait, pre.Duration, rep.Preserve.Counts[pause.Preserved], n, rep.Headroom)
				require.NoError(t, oldRep.Err(), "the whole drain's estimate kept every sandbox")
				assert.NoError(t, rep.Err(), "the estimate at the level keeps every sandbox too")
				assert.Equal(t, n, rep.Preserve.Counts[pause.Preserved])
				assert.Equal(t, drain.TimedOut, rep.Phase(drain.PhaseDrain).Result, "the preStop wait ends at the plan's deadline: it binds")
				switch {
				case tc.jitter == 0:
					// A noise-free disk: the first drain learned 8, the start, and
					// ran past it (16 at once): a pause at 8 is shorter than the
					// drain's mix, and the plan counts rounds of 8 at it.
					require.Equal(t, 8, r.LearnedLimit)
					assert.Less(t, r.LearnedEstimate, r.Estimate, "a pause at the level, not the drain's mix")
					assert.Greater(t, wait, oldWait, "a shorter estimate at the level leaves the preStop wait more")
				case r.LearnedEstimate < r.Estimate:
					assert.Greater(t, wait, oldWait, "a shorter estimate at the level leaves the preStop wait more")
				default:
					// A level above the start (16, on a disk flat past its knee,
					// measured a hair faster in the noise) whose pauses took longer
					// than the drain's mix of 8 and 16: the plan counts rounds of the
					// start (8) before the first epoch tests the level, at the
					// level's estimate. Longer than a round of 8 takes, never shorter.
					assert.Greater(t, r.LearnedLimit, 8, "only a level above the start measures longer than the drain's mix")
				}
			})
		})
	}
}

// A rates file written before the estimate was measured at the level (the
// whole drain's estimate as learned_estimate_ns), or before
// learned_estimate_ns existed at all, still reads, and a server still
// starts from its level with the estimate in it.
func TestRatesWithTheWholeDrainsEstimateStillRead(t *testing.T) {
	for name, tc := range map[string]struct {
		body  string
		level int
		est   time.Duration
	}{
		"whole drain's estimate at the level": {`{"written": "2026-12-06T16:44:20Z", "estimate_ns": 1800000000, "observations": 20, "limit": 16,
			"learned_limit": 8, "learned_estimate_ns": 1800000000, "max_limit": 32, "grace_ns": 8000000000}`, 8, 1800 * time.Millisecond},
		"before learned_estimate_ns": {`{"written": "2026-12-01T10:00:00Z", "estimate_ns": 1800000000, "limit": 16,
			"learned_limit": 8, "max_limit": 32, "grace_ns": 8000000000}`, 8, 1800 * time.Millisecond},
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, learned.File), []byte(tc.body), 0o600))
		r, err := learned.Read(filepath.Join(dir, learned.File))
		require.NoError(t, err, name)
		level, est := r.Level()
		assert.Equal(t, tc.level, level, name)
		assert.Equal(t, tc.est, est, name)
		st := learned.Server{Dir: dir, Prior: time.Second}.Start()
		cfg := st.Config()
		st.Close()
		assert.Equal(t, tc.level, cfg.Limit, name)
		assert.Equal(t, tc.est, cfg.Estimator.Estimate(), name)
	}
}

// The rule, on Reports made by hand (level 4, the whole drain's estimate
// 5 s): preserves that ran 4 at once count as they took; 8 at once count
// at 4/8 x 1.05 of their time (throughput past the level grows by less
// than the climber's payFrac); a tail preserve that ran alone, below three
// quarters of the level, does not count; fewer than a round of the level
// keep the whole drain's; and an entry retried is not counted in flight
// (its span holds its backoffs), which would have the 4 beside it look 5
// at once and count them shorter than they took.
func TestEstimateAtTheLevelFromTheReportsEntries(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	entry := func(id string, from, d time.Duration, attempts int, out pause.Outcome) pause.Entry {
		return pause.Entry{ID: id, Outcome: out, Attempts: attempts, Start: t0.Add(from), End: t0.Add(from + d), Duration: d}
	}
	round := func(k int, d time.Duration) []pause.Entry {
		var es []pause.Entry
		for i := range k {
			es = append(es, entry(fmt.Sprint("sb-", i), 0, d, 1, pause.Preserved))
		}
		return es
	}
	for _, tc := range []struct {
		name    string
		entries []pause.Entry
		want    time.Duration
	}{
		{"4 at once", round(4, 2*time.Second), 2 * time.Second},
		{"8 at once", round(8, 4*time.Second), 2100 * time.Millisecond},
		{"a tail alone", append(round(4, 2*time.Second), entry("tail", 2*time.Second, 500*time.Millisecond, 1, pause.Preserved)), 2 * time.Second},
		{"fewer than a round", round(3, 2*time.Second), 5 * time.Second},
		{"a retried one beside", append(round(4, 2*time.Second), entry("retried", 0, 2*time.Second, 2, pause.Failed)), 2 * time.Second},
	} {
		r := learned.Rates{Estimate: 5 * time.Second}
		r.FromReport(&pause.Report{LearnedLimit: 4, Limit: 4, Entries: tc.entries}, nil)
		assert.Equal(t, 4, r.LearnedLimit, tc.name)
		assert.InDelta(t, tc.want.Seconds(), r.LearnedEstimate.Seconds(), 1e-6, tc.name)
	}
}

// The mean of one pause at the learned level is saved with the level and
// its estimate, by the same rule (the pauses that ran beside about as
// many, scaled to it): drainkit plan predicts the next drain at it, where
// the file kept none and the plan predicted at the estimate, max of mean
// and p90, the reserve's rule (drainsim -warm: 4.05 s predicted, 2.44 s
// measured). On a noise-free disk it is the disk's time at the level,
// within the estimate's tenth; on a noisy one below the estimate. A drain
// that learns no level keeps it with the level, a drain with fewer pauses
// at the level than a round keeps the whole drain's mean with the whole
// drain's estimate, and a file written before the field reads with none.
func TestTheMeanAtTheLevelIsSavedAndKeptWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const knee, n = 4, 40
		r, _ := learnOn(t, t.TempDir(), newDiskNode(knee, n))
		at := newDiskNode(knee, 0).alone(r.LearnedLimit)
		t.Logf("noise-free: level %d, mean %v, estimate %v at it; the disk's time %v", r.LearnedLimit, r.LearnedMean, r.LearnedEstimate, at)
		assert.GreaterOrEqual(t, r.LearnedMean, at, "never shorter than a pause at the level")
		assert.LessOrEqual(t, r.LearnedMean, r.LearnedEstimate)
		assert.Equal(t, r.LearnedMean, r.LevelMean())

		noisy, _ := learnOn(t, t.TempDir(), newNoisyNode(knee, n, 0.3, 4))
		t.Logf("noisy: level %d, mean %v, estimate %v at it", noisy.LearnedLimit, noisy.LearnedMean, noisy.LearnedEstimate)
		assert.Positive(t, noisy.LevelMean())
		assert.Less(t, noisy.LevelMean(), noisy.LearnedEstimate, "a noisy disk's mean is below its p90")

		fixed := learned.Rates{Estimate: 9 * time.Second, Mean: 7 * time.Second}
		fixed.FromReport(&pause.Report{Limit: 4}, noisy)
		assert.Equal(t, noisy.LearnedMean, fixed.LearnedMean, "a drain that learned no level keeps its mean with it")
	})

	t0 := time.Date(2026, 12, 6, 17, 0, 0, 0, time.UTC)
	round := func(from, d time.Duration, k int) []pause.Entry {
		var es []pause.Entry
		for i := range k {
			es = append(es, pause.Entry{ID: fmt.Sprint("sb-", from, "-", i), Outcome: pause.Preserved, Attempts: 1,
				Start: t0.Add(from), End: t0.Add(from + d), Duration: d})
		}
		return es
	}
	// The plain mean, not the Estimator's weighted one: a round of 4 that
	// took 1 s, then one that took 3 s, is 2 s a preserve at 4; weighted in
	// the order they ended it is 2.18 s, the longer ending last, as a Run's
	// longest preserves do.
	two := learned.Rates{Estimate: 5 * time.Second, Mean: 4 * time.Second}
	two.FromReport(&pause.Report{LearnedLimit: 4, Limit: 4, Entries: append(round(0, time.Second, 4), round(time.Second, 3*time.Second, 4)...)}, nil)
	assert.Equal(t, 3*time.Second, two.LearnedEstimate, "the estimate is the Estimator's rule: its p90")
	assert.Equal(t, 2*time.Second, two.LearnedMean, "the mean is the sample's")

	few := learned.Rates{Estimate: 5 * time.Second, Mean: 4 * time.Second}
	few.FromReport(&pause.Report{LearnedLimit: 4, Limit: 4, Entries: round(0, 2*time.Second, 3)}, nil)
	assert.Equal(t, 5*time.Second, few.LearnedEstimate, "fewer than a round: the whole drain's estimate")
	assert.Equal(t, 4*time.Second, few.LearnedMean, "and the whole drain's mean")

	dir := t.TempDir()
	path := filepath.Join(dir, learned.File)
	require.NoError(t, os.WriteFile(path, []byte(`{"written": "2026-12-06T19:00:00Z", "estimate_ns": 1800000000, "mean_ns": 1600000000,
		"observations": 20, "limit": 16, "learned_limit": 8, "learned_estimate_ns": 1350000000, "max_limit": 32, "grace_ns": 8000000000}`), 0o600))
	old, err := learned.Read(path)
	require.NoError(t, err)
	assert.Zero(t, old.LevelMean(), "a file written before learned_mean_ns keeps no mean at the level")
	require.NoError(t, os.WriteFile(path, []byte(`{"estimate_ns": 1, "learned_limit": 8, "learned_estimate_ns": 1, "learned_mean_ns": -1}`), 0o600))
	_, err = learned.Read(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "learned_mean_ns is negative")
}
