package planat_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/planat"
)

// A grace of 2 s and 700 ms of work after SIGTERM, laid out at T0 of a
// virtual clock: the preStop wait runs on to T0 + 2 s, when the kubelet
// gives up on the hook, and the work gets the kubelet's 2 s after SIGTERM
// less the margin, as the Drainer's plan lays it out (docs/faults.md row
// 2540).
func Example() {
	b, _ := deadline.New(2*time.Second, deadline.Config{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.OnPreStop(t0)
	plan, _ := deadline.NewPlan(b, deadline.Phase{Name: "drain"}, deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(700 * time.Millisecond)})
	for _, w := range planat.Windows(plan, t0, "").([]deadline.Window) {
		fmt.Printf("%s until T0+%v\n", w.Name, w.Deadline.Sub(t0))
	}
	// Output:
	// drain until T0+2s
	// preserve until T0+3s
}
