// Package nodeend lets drain tell a deadline.Budget when the node goes down
// under the kubelet's own termination (drain.Config.KubeletGrace: graceful
// node shutdown ends the node at its slice's end), without an exported
// name in deadline. The budget's SIGKILL is the kubelet's, never sooner
// than 2 s after SIGTERM; the node does not wait for those 2 s, so the
// budget's deadline must fall before its end too. Package deadline installs
// Set when it is initialised, as package drain installs gatevia.EnterGRPC;
// a server never uses it.
//
//	budget.Tighten(budget.Start().Add(kubeletGrace)) // SIGKILL, before SIGTERM's floor
//	nodeend.Set(budget, budget.Start().Add(kubeletGrace))
//
// Guarantees: once Set, the budget's Deadline is never later than end
// less its margin, the margin taking at most half of the time from the
// last of T0, SIGTERM and the kubelet's run over to end (as it does of the
// time to SIGKILL); its Kill stays the kubelet's SIGKILL. An end later
// than one set before, or on a budget not anchored yet, changes nothing. Set
// reports whether the deadline moved, and then closes the budget's Changed
// channel. A budget of any other type than *deadline.Budget panics, naming
// the type; a program that does not link deadline panics saying so.
package nodeend

import (
	"fmt"
	"time"
)

// Set tells budget (a *deadline.Budget) that the node goes down at end.
var Set = func(budget any, end time.Time) bool {
	panic(fmt.Sprintf("nodeend: no deadline package in this program to set %T's end", budget))
}
