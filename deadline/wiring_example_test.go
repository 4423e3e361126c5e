package deadline_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// The package documentation's wiring, run: a 3600 s grace, 40 sandboxes
// at 8 at a time and a 20 s prior per pause.
func Example_wiring() {
	logger := slog.New(slog.DiscardHandler)
	sandboxes := 40
	runningSandboxes := func() int { return sandboxes } // the server's live count
	concurrency := func() int { return 8 }
	ctx := context.Background()

	budget, err := deadline.New(3600*time.Second, deadline.Config{Logger: logger})
	if err != nil {
		log.Fatal(err) // names the field; NewPlan would only say the budget is nil
	}
	pauses := deadline.NewEstimator(20 * time.Second) // fed with observed pause times
	plan, err := deadline.NewPlan(budget,
		deadline.Phase{Name: "drain"}, // the preStop wait
		deadline.Phase{Name: "preserve", Reserve: deadline.Work(runningSandboxes, pauses, concurrency)},
		deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(30 * time.Second)},
		deadline.Phase{Name: "exit", Reserve: deadline.Fixed(5 * time.Second)},
	)
	if err != nil {
		log.Fatal(err)
	}

	t0 := time.Now()
	budget.OnPreStop(t0)
	fmt.Println("preStop may wait until T0 +", plan.Deadline("drain").Sub(t0))

	budget.OnSIGTERM(time.Now())                 // the kubelet's arithmetic refines SIGKILL
	ctx, cancel := plan.Context(ctx, "preserve") // then "teardown", "exit"
	defer cancel()
	dl, _ := ctx.Deadline()
	fmt.Println("preserve ends where teardown and exit's reserves begin:", budget.Deadline().Sub(dl))
	// Output:
	// preStop may wait until T0 + 57m40s
	// preserve ends where teardown and exit's reserves begin: 35s
}
