package planat

import (
	"fmt"
	"time"
)

// A Layout is the layout a Plan's Shortfall is counted in: the one where
// the reserves lack the least.
type Layout int

const (
	// FromT0: the phases from T0 to the budget's deadline; Left + Margin
	// is the grace from T0.
	FromT0 Layout = iota
	// AfterSleep: the phases from SIGTERM, once the kubelet's preStop sleep
	// (deadline.Config.PreStopSleep) is over, to the deadline it gives;
	// Left + Margin is what SIGTERM leaves, max(grace - sleep, 2 s).
	AfterSleep
	// RunOn: the preStop wait run on to the budget's SIGKILL, when the
	// kubelet gives up on the hook, and the later phases in what SIGTERM
	// there leaves; Left + Margin is the kubelet's 2 s after SIGTERM.
	RunOn
)

// A Figure is a Plan's Shortfall and the layout it is counted in, all read
// at once: what an error that refuses the plan says.
type Figure struct {
	Short  time.Duration // deadline.Plan.Shortfall
	Left   time.Duration // what the layout leaves the reserves (RunOn: the later phases') before the deadline
	Margin time.Duration // what the budget keeps before SIGKILL in that layout
	Layout Layout
}

// Shortfall returns plan's (a *deadline.Plan's) Shortfall as a Figure:
// the one rule by which drain.New refuses a plan and names what it lacks
// (the layout's numbers). Package deadline installs it when it is
// initialised.
var Shortfall = func(plan any) Figure {
	panic(fmt.Sprintf("planat: no deadline package in this program to count %T's shortfall", plan))
}
