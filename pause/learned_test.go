package pause_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/pause"
)

// A node is a device and the sandboxes a drain finds on it.
type node struct {
	name string
	mk   func() *fakesandbox.Node
}

// storeNode: 256 preserves of 20 ms on a store without a knee (the wait
// mix of BenchmarkPreserveWait).
var storeNode = node{"store, no knee: 256 x 20 ms", func() *fakesandbox.Node {
	n := fakesandbox.NewNode()
	n.AddN("sb", 256, 20*time.Millisecond)
	return n
}}

// kneeNode: 400 x 16 MiB on a disk of 64 MiB/s that one writer drives at
// 16 MiB/s: the knee is 4 writers, flat beyond.
var kneeNode = node{"disk, knee at 4: 400 x 16 MiB", func() *fakesandbox.Node {
	return diskNode(&fakesandbox.Disk{Bandwidth: 64 * mib, PerWriter: 16 * mib}, 400, 16)
}}

// thrashNode: the same disk, thrashing past the knee (32 writers move 17
// MiB/s of its 64).
var thrashNode = node{"disk, knee at 4, thrashing: 400 x 16 MiB", func() *fakesandbox.Node {
	return diskNode(&fakesandbox.Disk{Bandwidth: 64 * mib, PerWriter: 16 * mib, Thrash: 0.1}, 400, 16)
}}

// fastNode: a disk of 1 GiB/s, 32 MiB/s a writer: no knee below 32.
var fastNode = node{"disk, no knee: 400 x 16 MiB at 1 GiB/s", func() *fakesandbox.Node {
	return diskNode(&fakesandbox.Disk{Bandwidth: 1024 * mib, PerWriter: 32 * mib}, 400, 16)
}}

// learnedDrain is what one drain of a node left in its server's state
// directory: the level it measured fastest and its estimate of one
// preserve.
type learnedDrain struct {
	limit    int
	estimate time.Duration
}

// drain runs one drain of n with left before the deadline, as a server
// started from what an earlier drain learned: its Estimator from the
// learned estimate (1 s with none), its limit from the learned level when
// fromLearned (else the default, cold), and returns the Report, how long
// it took, the limits it moved through and what it learned.
func drain(t *testing.T, n node, left time.Duration, from learnedDrain, fromLearned bool) (rep *pause.Report, took time.Duration, limits []string, next learnedDrain) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		prior := from.estimate
		if prior == 0 {
			prior = time.Second
		}
		est := deadline.NewEstimator(prior)
		cfg := pause.Config{Estimator: est, Logger: slog.New(slog.NewTextHandler(&buf, nil))}
		if fromLearned && from.limit > 0 {
			cfg.Limit, cfg.MaxLimit = from.limit, 32
		}
		p, err := pause.New(n.mk(), cfg)
		require.NoError(t, err)
		rep, took = runFor(t, p, left, 0)
		limits = limitsTaken(buf.String())
		next = learnedDrain{rep.LearnedLimit, est.Estimate()}
	})
	return rep, took, limits, next
}

// A node drains again and again, and what the last drain learned (the
// level it measured fastest, its estimate of one preserve) is where its
// next drain starts. The table, in virtual time: each node drained cold
// once to learn, then drained again cold and from what was learned, with
// ample time and with a deadline that binds (0.5 to 1.5 times a deadline
// the cold drain does not meet), on the same device and on one that
// changed since:
//
//	learned on              drained now        learned  ample: cold / learned   preserved, binding: cold / learned
//	store, no knee          the same           32       200 ms / 180 ms        56 120 184 248 256 / 72 136 200 256 256
//	disk, knee at 4         the same            4       103 s / 103 s          40 56 80 96 120 / 36 60 76 100 116
//	disk, thrashing past 4  the same            4       109 s / 105 s          8 33 53 73 93 / 33 53 73 93 113
//	disk, no knee           thrashing past 4   32       109 s / 110 s          8 33 53 73 93 / the same
//	disk, thrashing past 4  no knee             4       7 s / 7 s              24 56 88 120 152 / the same
//
// The learned start never preserves fewer than the cold one before a
// binding deadline, but for the round a deadline cuts on the flat knee
// (cut, below); with ample time it takes as long or less (where the two
// hold the same levels they end within half a per cent of each other,
// either way, as the scheduler orders ties; -race moves them). Its
// first epoch runs where the cold one's does (8); the
// learned level is taken only when that epoch agrees with it: above 8 when
// the preserves kept to the learned estimate (8 is below the knee), below
// 8 when they did not (8 is past it). On a node that changed it climbs as
// the cold start does: a start at the learned level at once would have
// thrashed the slower device for a whole round
// (TestLearnedLevelIsNotTakenOnADeviceThatGotSlower), and a start at a
// low learned level would have cost the faster one a round (at 2 s: 60
// preserved where the cold start keeps 88).
func TestLearnedStartIsNeverWorseThanTheColdStart(t *testing.T) {
	for _, tc := range []struct {
		before, now node
		binding     time.Duration
		learned     int
		// cut is how many more preserves a deadline may cut from the learned Run
		// than from the cold one. On the flat knee 4 and 8 at once move the same
		// bytes, every round of equal preserves ends together, and a deadline cuts
		// a round of 4 x 1 s or of 8 x 2 s at different points: the learned Run
		// may lose the 4 it has in flight where the cold one had just ended a
		// round (and gains 4 where it had not). Where the learned level is
		// refused (32 on the disk that now thrashes) both Runs climb alike,
		// halving on past 8 with the deadline binding, and which of the
		// preserves ending at one instant is sampled first moves a decision:
		// up to 3 of about 90 either way, seen under -race. Elsewhere none.
		cut int
	}{
		{storeNode, storeNode, 150 * time.Millisecond, 32, 0},
		{kneeNode, kneeNode, 20 * time.Second, 4, 4},
		{thrashNode, thrashNode, 20 * time.Second, 4, 0},
		{fastNode, thrashNode, 20 * time.Second, 32, 4},
		{thrashNode, fastNode, 2 * time.Second, 4, 0},
	} {
		_, _, _, learned := drain(t, tc.before, time.Hour, learnedDrain{}, false)
		require.Equal(t, tc.learned, learned.limit, "learned on %s", tc.before.name)
		_, cold, coldLimits, _ := drain(t, tc.now, time.Hour, learned, false)
		_, lt, lLimits, _ := drain(t, tc.now, time.Hour, learned, true)
		if tc.before.name == storeNode.name && tc.now.name == storeNode.name {
			assert.Equal(t, 9*20*time.Millisecond, lt, "a round at 8, the rest at 32: one round fewer than cold")
			assert.Equal(t, 10*20*time.Millisecond, cold)
		}
		var cs, ls []int
		for _, f := range []float64{0.5, 0.75, 1, 1.25, 1.5} {
			left := time.Duration(f * float64(tc.binding))
			coldRep, _, _, _ := drain(t, tc.now, left, learned, false)
			lrep, _, _, _ := drain(t, tc.now, left, learned, true)
			cs, ls = append(cs, coldRep.Counts[pause.Preserved]), append(ls, lrep.Counts[pause.Preserved])
			assert.GreaterOrEqual(t, ls[len(ls)-1], cs[len(cs)-1]-tc.cut, "%s -> %s, %v left", tc.before.name, tc.now.name, left)
		}
		t.Logf("%-42s -> %-42s learned %2d (%v): ample: cold %v %v, learned %v %v; binding %v x 0.5-1.5: cold %v, learned %v",
			tc.before.name, tc.now.name, learned.limit, learned.estimate, cold, head(coldLimits), lt, head(lLimits), tc.binding, cs, ls)
	}
}

// A node learned 32 on a disk without a knee (a preserve of 16 MiB took
// 0.5 s), and its disk now thrashes past 4 writers. The next drain starts
// at 8, as a cold one: its first 8 preserves take 2.8 s each against the
// 0.5 s learned, so 32 is not taken and the limit climbs as a cold one's
// would (one doubling, to 16, then down): 51–53 preserved in 20 s, as
// cold (48 when the deadline pinned it at 8, before it halved on).
// A Run that starts at 32 at once (a Preserver going on from its last Run
// at 32, on the same changed disk) shares the disk among 32 writers, 17
// MiB/s in all: its first completions would come after 30 s, and not one
// sandbox is preserved by the deadline.
func TestLearnedLevelIsNotTakenOnADeviceThatGotSlower(t *testing.T) {
	_, _, _, learned := drain(t, fastNode, time.Hour, learnedDrain{}, false)
	require.Equal(t, learnedDrain{32, 500 * time.Millisecond}, learned)
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		n := thrashNode.mk()
		p, err := pause.New(n, pause.Config{Limit: learned.limit, MaxLimit: 32,
			Estimator: deadline.NewEstimator(learned.estimate), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		require.NoError(t, err)
		assert.Equal(t, 8, p.Limit(), "the first Run starts where a cold one does")
		rep, _ := runFor(t, p, 20*time.Second, 0)
		assert.GreaterOrEqual(t, rep.Counts[pause.Preserved], 48)
		assert.Equal(t, "16", limitsTaken(buf.String())[0], "a doubling, not the learned 32")
		assert.Equal(t, 16, n.MaxInFlight())
	})
	synctest.Test(t, func(t *testing.T) {
		n := fastNode.mk()
		p, err := pause.New(n, pause.Config{Limit: 32, MaxLimit: 32, Estimator: deadline.NewEstimator(learned.estimate)})
		require.NoError(t, err)
		runFor(t, p, time.Hour, 0)
		require.Equal(t, 32, p.Limit(), "the first Run took 32: the disk is the one that learned it")
		slower := &fakesandbox.Disk{Bandwidth: 64 * mib, PerWriter: 16 * mib, Thrash: 0.1}
		for i := range 400 {
			n.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("slow-", i), Bytes: 16 * mib, Disk: slower})
		}
		rep, _ := runFor(t, p, 20*time.Second, 0)
		assert.Equal(t, 0, rep.Counts[pause.Preserved], "32 at once on the slower disk")
	})
}

// head returns the first limits of a Run, for a log line.
func head(s []string) string {
	if len(s) > 6 {
		return fmt.Sprint(s[:6], "...")
	}
	return fmt.Sprint(s)
}

// Report.LearnedLimit is the fewest preserves at once that delivered the
// best throughput measured, and only from a Run that compared limits: 32
// on a store without a knee (8 and 16 measured less), 4 on a disk flat
// past its knee (16 moved as much, with each preserve four times as long),
// zero for a fixed limit and for a Run of six sandboxes, too few for one
// epoch of four at 8 and a second one to compare it with.
func TestReportLearnedLimitIsTheKneeMeasured(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func() *fakesandbox.Node
		cfg  pause.Config
		want int
	}{
		{"store, no knee", storeNode.mk, pause.Config{}, 32},
		{"disk, knee at 4", kneeNode.mk, pause.Config{}, 4},
		{"fixed limit", storeNode.mk, pause.Config{Limit: 8}, 0},
		{"six sandboxes", func() *fakesandbox.Node {
			n := fakesandbox.NewNode()
			n.AddN("sb", 6, 20*time.Millisecond)
			return n
		}, pause.Config{}, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			p, err := pause.New(tc.mk(), tc.cfg)
			require.NoError(t, err)
			rep, _ := runFor(t, p, time.Hour, 0)
			assert.Equal(t, tc.want, rep.LearnedLimit, tc.name)
		})
	}
}

// A node learned 4 on a disk that thrashes past 4 writers (a preserve of
// 16 MiB took 1 s there), and drains again with 20 s left for 400: the
// deadline binds from the first epoch. That epoch, at 8, takes 2.8 s a
// preserve against the 1 s learned: 8 is past the knee, as learned, and
// the limit goes down to 4 at once; the deadline's pin waits for 4's
// epoch, as it waits for a climb still paying, since fewer at once past
// the knee move as much and each ends sooner. 76 preserved; pinned at 8
// on the first epoch's measurement, the same Run preserved 56, and the
// cold start, which tries 16 first, 51–53: 16 moved less than 8, so it
// halves on down to 2 and back to 4 (pinned at 8 there, it preserved 48).
// The learned Run halves on from 4 as well, 4 having moved more than 8,
// and pays an epoch at 2 for it: 71–73 (the counts vary with the order in
// which preserves ending at one instant are sampled).
func TestLearnedLevelBelowTheStartIsTakenWhenTheDeadlineBinds(t *testing.T) {
	_, _, _, learned := drain(t, thrashNode, time.Hour, learnedDrain{}, false)
	require.Equal(t, 4, learned.limit)
	rep, _, limits, _ := drain(t, thrashNode, 20*time.Second, learned, true)
	require.NotEmpty(t, limits)
	assert.Equal(t, "4", limits[0], "straight to the learned level")
	cold, _, coldLimits, _ := drain(t, thrashNode, 20*time.Second, learned, false)
	assert.Equal(t, []string{"16", "4"}, coldLimits[:2])
	assert.GreaterOrEqual(t, cold.Counts[pause.Preserved], 48, "no fewer than pinned at 8")
	assert.Greater(t, rep.Counts[pause.Preserved], cold.Counts[pause.Preserved]+15, "the learned start saves the climb's cost")
}

// A Preserver started from a learned 32 (Limit 32, MaxLimit 32) whose first
// Run ends before its first epoch decides (three sandboxes, fewer than the
// epoch's four; a deadline that cut its first eight preserves; a context
// cancelled before it started) tested nothing: the next Run still holds the learned level, and
// jumps to 32 after its first epoch on the disk that learned it, where a
// cold one doubles to 16 first. The first Run had taken the level and lost
// it with nothing measured.
func TestLearnedLevelSurvivesARunThatDecidedNothing(t *testing.T) {
	disk := &fakesandbox.Disk{Bandwidth: 1024 * mib, PerWriter: 32 * mib}
	for _, tc := range []struct {
		name  string
		first func(t *testing.T, p *pause.Preserver, n *fakesandbox.Node)
	}{
		{"three sandboxes", func(t *testing.T, p *pause.Preserver, n *fakesandbox.Node) {
			for i := range 3 {
				n.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("few-", i), Bytes: 16 * mib, Disk: disk})
			}
			rep, _ := runFor(t, p, time.Hour, 0)
			require.Equal(t, 3, rep.Counts[pause.Preserved])
			assert.Zero(t, rep.LearnedLimit)
		}},
		{"a deadline before the first completion", func(t *testing.T, p *pause.Preserver, n *fakesandbox.Node) {
			for i := range 8 {
				n.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("cut-", i), Bytes: 16 * mib, Disk: disk})
			}
			rep, _ := runFor(t, p, 100*time.Millisecond, 0)
			require.Equal(t, 8, rep.Counts[pause.TimedOut])
			for i := range 8 {
				n.Remove(fmt.Sprint("cut-", i))
			}
		}},
		{"cancelled before it started", func(t *testing.T, p *pause.Preserver, n *fakesandbox.Node) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			rep := p.Run(ctx, time.Time{})
			assert.Zero(t, rep.Counts[pause.Preserved])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				n := fakesandbox.NewNode()
				p, err := pause.New(n, pause.Config{Limit: 32, MaxLimit: 32,
					Estimator: deadline.NewEstimator(500 * time.Millisecond), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
				require.NoError(t, err)
				tc.first(t, p, n)
				assert.Equal(t, 8, p.Limit(), "%s: the next Run starts where a cold one does", tc.name)
				buf.Reset()
				for i := range 400 {
					n.Add(&fakesandbox.Sandbox{Name: fmt.Sprint("sb-", i), Bytes: 16 * mib, Disk: disk})
				}
				rep, _ := runFor(t, p, time.Hour, 0)
				require.Equal(t, 400, rep.Counts[pause.Preserved])
				limits := limitsTaken(buf.String())
				require.NotEmpty(t, limits)
				assert.Equal(t, "32", limits[0], "%s: the learned level, still to test", tc.name)
			})
		})
	}
}

// A node whose last drain learned 4 (8 was past its knee there) plans its
// next drain with rounds of 4 until a Run has tested that level: 100
// preserves estimated at 1 s reserve 25 s, not the 13 s rounds of 8 would,
// which would end the preStop wait too late for a node that sustains 4.
// The Run still starts at 8 and tests the level; on this node, where 8
// keeps to the estimates, the level is not taken, the limit climbs, and the
// reserve follows it down.
func TestReserveCountsOnALearnedLevelBelowTheStartUntilARunTestedIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakesandbox.NewNode()
		node.AddN("sb", 100, time.Second)
		p, err := pause.New(node, pause.Config{Limit: 4, MaxLimit: 32, Estimator: deadline.NewEstimator(time.Second)})
		require.NoError(t, err)
		reserve := deadline.Work(func() int { return 100 }, p.Estimator(), p.Limit)
		assert.Equal(t, 25*time.Second, reserve(), "rounds of the learned 4")

		rep, _ := runFor(t, p, time.Hour, 0)
		require.Equal(t, 100, rep.Counts[pause.Preserved])
		assert.GreaterOrEqual(t, node.MaxInFlight(), 8, "the Run started at 8, not at the learned 4")
		assert.Greater(t, p.Limit(), 8, "8 kept to the estimates: the node got faster, the limit climbed")
		assert.Less(t, reserve(), 13*time.Second, "the reserve follows the tested limit")
	})
}
