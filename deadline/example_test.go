package deadline_test

import (
	"fmt"
	"time"

	"github.com/drainkit/drainkit/deadline"
)

// The AgentENV case (shared/seeds, AgentENV #413): a node server with a
// 3600 s grace period whose preStop hook waits for running sandboxes. The
// preStop wait ends at the drain deadline, which leaves the preserve reserve
// (the live sandbox count x the estimated pause / concurrency), the ublk
// teardown and the exit inside the same budget, so SIGTERM still has enough
// time. While the reserves fit, a phase's deadline does not depend on when
// it is read, so the example reads them all at T0.
func Example_agentENV() {
	// At server start: the manifest's grace period, and what a pause costs.
	budget, _ := deadline.New(3600*time.Second, deadline.Config{})
	pauses := deadline.NewEstimator(20 * time.Second) // prior; the preserver feeds it
	running := 120                                    // live sandbox count (an atomic in a real server)
	plan, _ := deadline.NewPlan(budget,
		deadline.Phase{Name: "drain"}, // the preStop wait
		deadline.Phase{Name: "preserve", Reserve: deadline.Work(
			func() int { return running }, pauses, func() int { return 8 })},
		deadline.Phase{Name: "teardown", Reserve: deadline.Fixed(30 * time.Second)},
		deadline.Phase{Name: "exit", Reserve: deadline.Fixed(5 * time.Second)},
	)

	// The kubelet calls the preStop hook: T0.
	t0 := time.Now()
	budget.OnPreStop(t0)
	at := func(t time.Time) time.Duration { return t.Sub(t0) }
	fmt.Println("SIGKILL at T0 +", at(budget.Kill()), "- deadline T0 +", at(budget.Deadline()))
	fmt.Println("120 running: preStop may wait until T0 +", at(plan.Deadline("drain")))

	// Sandboxes finish while preStop waits; the drain deadline moves later.
	running = 16
	fmt.Println("16 running:  preStop may wait until T0 +", at(plan.Deadline("drain")))

	// The hook returns at the drain deadline; SIGTERM arrives 0.4 s later.
	// The kubelet subtracts the hook's 3520 s (truncated) from 3600 s.
	sigterm := plan.Deadline("drain").Add(400 * time.Millisecond)
	budget.OnSIGTERM(sigterm)
	fmt.Println("SIGTERM at T0 +", at(sigterm), "- SIGKILL at T0 +", at(budget.Kill()))
	for _, w := range plan.Windows("preserve") {
		fmt.Printf("  %-8s reserve %-4v ends SIGTERM + %v\n", w.Name, w.Reserve, w.Deadline.Sub(sigterm))
	}
	fmt.Println("shortfall:", plan.Shortfall())

	// Without the plan, the hook waited the whole hour and SIGTERM got:
	fmt.Println("seed bug: SIGTERM + ", deadline.KubeletRemaining(3600*time.Second, 3600*time.Second))
	// Output:
	// SIGKILL at T0 + 1h0m0s - deadline T0 + 59m55s
	// 120 running: preStop may wait until T0 + 54m20s
	// 16 running:  preStop may wait until T0 + 58m40s
	// SIGTERM at T0 + 58m40.4s - SIGKILL at T0 + 1h0m0.4s
	//   preserve reserve 40s  ends SIGTERM + 40s
	//   teardown reserve 30s  ends SIGTERM + 1m10s
	//   exit     reserve 5s   ends SIGTERM + 1m15s
	// shortfall: 0s
	// seed bug: SIGTERM +  2s
}

// A plan laid out at SIGTERM: each phase ends where the reserves of the
// later ones begin, and the work a phase started must be over where the
// critical ublk teardown begins.
func ExamplePlan_Windows() {
	budget, _ := deadline.New(60*time.Second, deadline.Config{Margin: 5 * time.Second})
	plan, _ := deadline.NewPlan(budget,
		deadline.Phase{Name: "gate", Max: 10 * time.Second},
		deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(20 * time.Second)},
		deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(10 * time.Second), Critical: true},
		deadline.Phase{Name: "exit", Reserve: deadline.Fixed(5 * time.Second)},
	)
	t0 := time.Now()
	budget.OnSIGTERM(t0) // no preStop hook: T0 is SIGTERM
	// The gate's Max counts from this call, a moment after T0.
	for _, w := range plan.Windows("") {
		fmt.Printf("%-8s ends T0 + %-3v work over by T0 + %v\n", w.Name, w.Deadline.Sub(t0).Round(time.Second), w.Hard.Sub(t0))
	}
	fmt.Println("shortfall:", plan.Shortfall())
	// Output:
	// gate     ends T0 + 10s work over by T0 + 40s
	// preserve ends T0 + 40s work over by T0 + 40s
	// ublk     ends T0 + 50s work over by T0 + 55s
	// exit     ends T0 + 55s work over by T0 + 55s
	// shortfall: 0s
}

// The kubelet's 2 s after a preStop hook that overran leave 1 s before the
// margin for 4.6 s of reserves: the critical ublk teardown gets its 600 ms
// first, preserve and http share the other 400 ms 3:1, and the gate, which
// reserves nothing, gets nothing.
func ExampleSplit() {
	sigterm := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	for _, w := range deadline.Split(sigterm, sigterm.Add(time.Second),
		deadline.Phase{Name: "gate"},
		deadline.Phase{Name: "preserve", Reserve: deadline.Fixed(3 * time.Second)},
		deadline.Phase{Name: "ublk", Reserve: deadline.Fixed(600 * time.Millisecond), Critical: true},
		deadline.Phase{Name: "http", Reserve: deadline.Fixed(time.Second)},
	) {
		fmt.Printf("%-8s %-5v to %-5v reserve %-5v short by %v\n",
			w.Name, w.Start.Sub(sigterm), w.Deadline.Sub(sigterm), w.Reserve, w.Short)
	}
	// Output:
	// gate     0s    to 0s    reserve 0s    short by 0s
	// preserve 0s    to 300ms reserve 3s    short by 2.7s
	// ublk     300ms to 900ms reserve 600ms short by 0s
	// http     900ms to 1s    reserve 1s    short by 900ms
}

// The kubelet's arithmetic after a preStop hook (G = 3600 s).
func ExampleKubeletRemaining() {
	const grace = 3600 * time.Second
	for _, hook := range []time.Duration{
		0,                                       // no hook
		2999*time.Second + 900*time.Millisecond, // truncated to 2999 s
		3599 * time.Second,                      // 1 s left, raised to 2 s
		3600 * time.Second,                      // hook ran the whole grace period
		3605 * time.Second,                      // overran: abandoned, still 2 s
	} {
		fmt.Printf("hook ran %-7v -> SIGKILL = SIGTERM + %v\n", hook, deadline.KubeletRemaining(grace, hook))
	}
	// Output:
	// hook ran 0s      -> SIGKILL = SIGTERM + 1h0m0s
	// hook ran 49m59.9s -> SIGKILL = SIGTERM + 10m1s
	// hook ran 59m59s  -> SIGKILL = SIGTERM + 2s
	// hook ran 1h0m0s  -> SIGKILL = SIGTERM + 2s
	// hook ran 1h0m5s  -> SIGKILL = SIGTERM + 2s
}

// After a hook that overran, the kubelet leaves 2 s; the margin shrinks to
// half of them so the server can still use one second.
func ExampleBudget_OnSIGTERM() {
	budget, _ := deadline.New(3600*time.Second, deadline.Config{})
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	budget.OnPreStop(t0)
	sigterm := t0.Add(3600 * time.Second)
	budget.OnSIGTERM(sigterm)
	st := budget.State()
	fmt.Println("SIGKILL:  SIGTERM +", st.Kill.Sub(sigterm))
	fmt.Println("deadline: SIGTERM +", st.Deadline.Sub(sigterm))
	// Output:
	// SIGKILL:  SIGTERM + 2s
	// deadline: SIGTERM + 1s
}

// kubectl delete --grace-period=30 during the preStop hook: the pod's
// deletionTimestamp cuts the manifest's hour to 30 s, and SIGKILL stays
// there at SIGTERM: the kubelet, timing the hook from its own start, never
// kills before the deletionTimestamp. The default margin follows the 30 s
// (3 s, where the hour kept 5 s).
func ExampleBudget_Tighten() {
	budget, _ := deadline.New(3600*time.Second, deadline.Config{})
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	budget.OnPreStop(t0)
	budget.Tighten(t0.Add(30 * time.Second)) // the deletionTimestamp, as kube.Pod.Tighten reads it
	fmt.Println("deadline: T0 +", budget.Deadline().Sub(t0))
	budget.OnSIGTERM(t0.Add(12500 * time.Millisecond)) // the hook ran 12.5 s
	fmt.Println("SIGKILL:  T0 +", budget.Kill().Sub(t0))
	// Output:
	// deadline: T0 + 27s
	// SIGKILL:  T0 + 30s
}

// The estimate follows observed pauses: an EWMA, but never below the 90th
// percentile of the recent ones.
func ExampleEstimator() {
	pauses := deadline.NewEstimator(10 * time.Second)
	fmt.Println("prior:", pauses.Estimate())
	for _, d := range []time.Duration{2, 2, 2, 2, 2, 2, 2, 2, 2, 12} {
		pauses.Observe(d * time.Second)
	}
	fmt.Println("mean:", pauses.Mean(), "p90:", pauses.Quantile(0.9), "estimate:", pauses.Estimate())
	// Output:
	// prior: 10s
	// mean: 4s p90: 2s estimate: 4s
}
