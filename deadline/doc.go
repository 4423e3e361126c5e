// Package deadline is the one time budget a terminating Kubernetes pod has,
// from the moment termination starts (T0: the preStop hook, or SIGTERM when
// there is none) to the SIGKILL the kubelet sends at the end of the grace
// period. Sandbox servers lose work when their preStop wait and their
// SIGTERM shutdown each assume they own the whole grace period; a Budget
// shared by both, split by a Plan into ordered phases, makes that impossible.
//
// Typical wiring, at server start:
//
//	budget, err := deadline.New(3600*time.Second) // the pod's terminationGracePeriodSeconds
//	pauses := deadline.NewEstimator(2 * time.Second)
//	plan, err := deadline.NewPlan(budget,
//		deadline.Phase{Name: "drain"},
//		deadline.Phase{Name: "preserve", Reserve: deadline.Work(running, pauses, func() int { return 16 })},
//		deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(30 * time.Second)},
//	)
//
// then budget.OnPreStop(time.Now()) in the preStop handler, waiting until
// plan.Deadline("drain"); budget.OnSIGTERM(time.Now()) in the signal handler,
// and each phase under plan.Context(ctx, name).
//
// Guarantees: every deadline a Budget or Plan hands out is an absolute time
// no later than the budget's Deadline (SIGKILL minus the margin); phase
// deadlines never decrease along the plan; later phases' reserves are
// honoured whenever the budget allows, and Plan.Shortfall reports by how
// much it does not. SIGTERM refinement follows the kubelet's arithmetic
// exactly (KubeletRemaining).
package deadline
