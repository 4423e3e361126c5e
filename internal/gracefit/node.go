package gracefit

import (
	"math"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/nodeend"
	"github.com/drainkit/drainkit/internal/satdur"
)

// NodeBudget is the budget of a drain the kubelet terminates on its own
// with the grace kubelet (drain.Config.KubeletGrace: graceful node
// shutdown's slice, a soft eviction's), as drain's tightenOwn makes it: a
// budget of grace configured by c at SIGTERM now (T0 a preStop sleep
// earlier), SIGKILL moved to T0 + kubelet, and the node's end there
// (internal/nodeend), before which the budget's deadline keeps its margin,
// at most half the time to it, however SIGTERM's 2 s floor holds SIGKILL.
// Without the end, a grace under 2 s was laid out to SIGTERM + 2 s less
// the margin, past the node's end (docs/faults.md row 2801).
func NodeBudget(grace, kubelet time.Duration, c deadline.Config) (*deadline.Budget, error) {
	b, err := deadline.New(grace, c)
	if err != nil {
		return nil, err
	}
	b.OnSIGTERM(time.Now())
	end := b.Start().Add(kubelet)
	b.Tighten(end)
	nodeend.Set(b, end)
	return b, nil
}

// AtSIGTERM returns the windows of phases in b and their shortfall as they
// are at b's SIGTERM, where the drain's work starts (a preStop sleep is
// spent): what Plan.Windows and Plan.ShortfallFrom return at that instant,
// laid out at a fixed instant, not at time.Now as a running drain does, so
// the same input gives the same figures however long the computing took.
func AtSIGTERM(b *deadline.Budget, phases []deadline.Phase) ([]deadline.Window, time.Duration) {
	st := b.State()
	windows := deadline.Split(st.SIGTERM, st.Deadline, phases...)
	var sum time.Duration
	for _, w := range windows {
		sum = satdur.Add(sum, w.Reserve)
	}
	return windows, max(sum-max(st.Deadline.Sub(st.SIGTERM), 0), 0)
}

// NodeShortfall is by how much the phases phasesAt gives do not fit when
// the kubelet terminates the pod on its own with the grace kubelet
// (NodeBudget of grace configured by c, laid out by AtSIGTERM): drainkit
// plan's node verdict, and what drain.New warns of. A budget deadline.New
// refuses holds nothing: the largest Duration.
func NodeShortfall(grace, kubelet time.Duration, c deadline.Config, phasesAt func(*deadline.Budget) []deadline.Phase) time.Duration {
	b, err := NodeBudget(grace, kubelet, c)
	if err != nil {
		return math.MaxInt64
	}
	_, short := AtSIGTERM(b, phasesAt(b))
	return short
}

// SmallestNode is the smallest whole number of seconds of the kubelet's
// own grace, up to Max, for which NodeShortfall is zero, or 0 if there is
// none.
func SmallestNode(grace time.Duration, c deadline.Config, phasesAt func(*deadline.Budget) []deadline.Phase) time.Duration {
	return SmallestWhere(func(kubelet time.Duration) bool { return NodeShortfall(grace, kubelet, c, phasesAt) == 0 })
}
