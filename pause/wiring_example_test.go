package pause_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/pause"
)

// server stands in for a sandbox server's own registry.
type server struct{ vms []*vm }

// RunningSandboxes lists the VMs not paused: a Lister lists what still
// needs preserving, and a Run preserves again a sandbox listed after its
// preserve (it was resumed).
func (s *server) RunningSandboxes(context.Context) ([]pause.Sandbox, error) {
	var running []pause.Sandbox
	for _, v := range s.vms {
		if !v.paused.Load() {
			running = append(running, v)
		}
	}
	return running, nil
}

// The Preserver under a deadline.Plan, by hand (package drain does this
// for a server): the plan's preserve phase bounds which pauses start, the
// budget's deadline bounds the ones in flight.
func Example_plan() {
	server := &server{vms: []*vm{{id: "vm-a", memoryMB: 512}, {id: "vm-b", memoryMB: 2048}, {id: "vm-c", memoryMB: 1024}}}
	budget, _ := deadline.New(30*time.Second, deadline.Config{})
	plan, _ := deadline.NewPlan(budget, deadline.Phase{Name: "preserve"})
	budget.OnSIGTERM(time.Now())
	ctx := context.Background()

	preserver, err := pause.New(pause.ListFunc(server.RunningSandboxes), pause.Config{
		Estimator: deadline.NewEstimator(2 * time.Second), // Preserver.Estimator feeds the plan's Work reserve
	}) // no Limit set: it adapts
	if err != nil {
		log.Fatal(err) // names the field that is wrong
	}
	ctx, cancel := plan.Context(ctx, "preserve")
	defer cancel()
	report := preserver.Run(ctx, budget.Deadline()) // report.Lost() = what SIGKILL would take
	fmt.Println("preserved", report.Counts[pause.Preserved], "lost", report.Lost())
	// Output: preserved 3 lost 0
}
