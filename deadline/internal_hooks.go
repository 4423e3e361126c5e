package deadline

import (
	"time"

	"github.com/drainkit/drainkit/internal/budgetconf"
	"github.com/drainkit/drainkit/internal/nodeend"
	"github.com/drainkit/drainkit/internal/planat"
	"github.com/drainkit/drainkit/internal/prestopsleep"
)

// The drain tells a budget the node's end under the kubelet's own
// termination through internal/nodeend, and drainkit sim lays a Plan out
// at an instant of its virtual time through internal/planat (where drain.New
// reads the figure it refuses a plan by), and drain.New
// names the preStop sleep through internal/prestopsleep, and lays the work
// out in the kubelet's own grace with the budget's configuration through
// internal/budgetconf: no exported name here.
func init() {
	prestopsleep.Of = func(budget any) time.Duration { return budget.(*Budget).sleep }
	budgetconf.Of = func(budget any) (margin, sleep time.Duration) {
		b := budget.(*Budget)
		return b.margin, b.sleep
	}
	nodeend.Set = func(budget any, end time.Time) bool { return budget.(*Budget).endAt(end) }
	planat.Windows = func(plan any, now time.Time, from string) any {
		p := plan.(*Plan)
		if p.budget == nil { // the zero Plan, as Windows: none
			return []Window(nil)
		}
		i := 0
		if from != "" {
			i = p.mustIndex(from)
		}
		return p.layout(now, i)
	}
	planat.Shortfall = func(plan any) planat.Figure { return plan.(*Plan).figure() }
}
