// Package planat lets drainkit sim lay a deadline.Plan out at an instant of
// its virtual time, without an exported name in deadline: a Plan's Window
// and Windows lay it out at time.Now, which a discrete-event model cannot
// move, and a model that laid the phases out by deadline.Split itself kept
// an older rule than the Drainer's Plan (the preStop wait that runs on into
// the kubelet's 2 s after SIGTERM, docs/faults.md row 2540). Package
// deadline installs Windows when it is initialised, as package drain
// installs gatevia.EnterGRPC; a server never uses it.
//
//	plan, _ := deadline.NewPlan(budget, phases...) // the budget anchored at t0, virtual
//	wait := planat.Windows(plan, t0, "").([]deadline.Window)[0] // the preStop wait, as the Drainer's at t0
//
// It also gives drain.New a Plan's Shortfall with the
// layout it is counted in (Shortfall, a Figure): the refusal names that
// layout's numbers, where New chose the layout by arithmetic of its own
// (docs/faults.md row 3001).
//
// Guarantees: Windows(plan, now, from) is plan.Windows(from) as if called at
// now, a []deadline.Window (this package cannot name the type: deadline
// imports it): the window of the named phase ("" for the first) and of every later
// one, laid out by the Plan's rule from now, with the budget as it is. It
// panics on an unknown name, as Plan.Windows does, on a plan of any other
// type than *deadline.Plan (naming the type), and in a program that does
// not link deadline.
package planat

import (
	"fmt"
	"time"
)

// Windows returns plan's (a *deadline.Plan's) windows from the phase from
// ("" for the first), laid out at now, as a []deadline.Window.
var Windows = func(plan any, now time.Time, from string) any {
	panic(fmt.Sprintf("planat: no deadline package in this program to lay %T out", plan))
}
