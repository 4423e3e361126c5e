package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A HookKind is what a Scenario's preStop hook does.
type HookKind int

// The hooks of the scenarios.
const (
	NoHook      HookKind = iota // no preStop hook
	HookReturns                 // an httpGet that answers after Scenario.HookTakes
	HookHangs                   // an httpGet that never answers
)

// A Scenario is one way a pod's container meets its termination, with the
// moments the real kubelet SIGTERMed it and saw it die, from T0 (the hook's
// start, or SIGTERM when there is no hook).
type Scenario struct {
	Name  string
	Grace time.Duration // terminationGracePeriodSeconds
	// NodeShutdown, when set, is the slice of the pod's priority group in a
	// graceful node shutdown, which ends the pod instead of a deletion: the
	// kubelet terminates it with min(Grace, NodeShutdown), the preStop hook
	// bounded by that grace too, and sets no deletionTimestamp.
	NodeShutdown time.Duration
	Hook         HookKind
	HookTakes    time.Duration // HookReturns: how long the hook takes
	// ExitOnSIGTERM: the process exits at once on SIGTERM; otherwise it
	// ignores it and dies by SIGKILL.
	ExitOnSIGTERM bool
	SIGTERM       time.Duration // when SIGTERM arrived
	Exit          time.Duration // when the process was dead
}

// Measured holds the scenarios as the real kubelet v1.34.4 (containerd
// 1.6.20, runc 1.1.5, cgroup v1, a shared 2-core VM) ran them in
// internal/realkubelet's TestRealKubeletTimingsMatchTheTable: the mean of
// four runs, rounded to 10 ms. The real kubelet adds 20-70 ms between the
// hook's return and SIGTERM and 25-200 ms between its SIGKILL timer and the
// death (CRI, shim, runc); the simulator adds none. That test checks the
// real kubelet still agrees with this table within 0.2 s; this package's
// TestSimulatorMatchesTheMeasuredKubelet checks the simulator does.
var Measured = []Scenario{
	{Name: "hook returns at once, SIGTERM ignored", Grace: 3 * time.Second, Hook: HookReturns,
		SIGTERM: 40 * time.Millisecond, Exit: 3100 * time.Millisecond},
	{Name: "hook takes 1.5 s (truncated to 1 s), SIGTERM ignored", Grace: 3 * time.Second, Hook: HookReturns, HookTakes: 1500 * time.Millisecond,
		SIGTERM: 1540 * time.Millisecond, Exit: 3590 * time.Millisecond},
	{Name: "hook hangs past the grace: the 2 s floor", Grace: 3 * time.Second, Hook: HookHangs,
		SIGTERM: 3030 * time.Millisecond, Exit: 5080 * time.Millisecond},
	{Name: "no hook, grace 1 s: the 2 s floor", Grace: time.Second, Hook: NoHook,
		SIGTERM: 0, Exit: 2050 * time.Millisecond},
	{Name: "hook returns at once, exits on SIGTERM", Grace: 3 * time.Second, Hook: HookReturns, ExitOnSIGTERM: true,
		SIGTERM: 30 * time.Millisecond, Exit: 30 * time.Millisecond},
}

// MeasuredNodeShutdown holds scenarios ended by a graceful node shutdown
// (the kubelet v1.34.4 of Measured, its shutdown manager driven through
// internal/fakelogind by TestRealKubeletTimingsMatchTheTable),
// with a manifest grace of 10 s and a slice of 3 s: the mean of three
// runs at load 6-8, rounded to 10 ms. The kubelet's arithmetic is a
// deletion's with the slice as the grace (the manifest's 10 s plays no
// part), and its latencies a deletion's too.
var MeasuredNodeShutdown = []Scenario{
	{Name: "node shutdown: hook hangs past the slice, the 2 s floor", Grace: 10 * time.Second, NodeShutdown: 3 * time.Second, Hook: HookHangs,
		SIGTERM: 3040 * time.Millisecond, Exit: 5080 * time.Millisecond},
	{Name: "node shutdown: hook takes 1.5 s (truncated to 1 s), SIGTERM ignored", Grace: 10 * time.Second, NodeShutdown: 3 * time.Second,
		Hook: HookReturns, HookTakes: 1500 * time.Millisecond, SIGTERM: 1550 * time.Millisecond, Exit: 3590 * time.Millisecond},
}

// Effective is the grace the kubelet terminates s's pod with: Grace, or the
// node-shutdown slice when that is shorter.
func (s Scenario) Effective() time.Duration {
	if s.NodeShutdown > 0 && s.NodeShutdown < s.Grace {
		return s.NodeShutdown
	}
	return s.Grace
}

// Simulate runs s through Terminate with an in-process process and hook,
// and returns when SIGTERM was sent and when the process exited, from T0.
// Run it under testing/synctest: its waits are the scenario's own.
func (s Scenario) Simulate(ctx context.Context) (sigterm, exit time.Duration, err error) {
	p := NewInProcess()
	var hook Hook
	switch s.Hook {
	case NoHook:
	case HookReturns:
		hook = HookFunc(func(ctx context.Context) error {
			select {
			case <-time.After(s.HookTakes):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	case HookHangs:
		hook = HookFunc(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	default:
		return 0, 0, fmt.Errorf("kubeletsim: scenario %q: unknown hook kind %d", s.Name, s.Hook)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-p.Signals():
			if s.ExitOnSIGTERM {
				p.Exit()
			}
		case <-stop:
		}
	}()
	tl, err := Terminate(ctx, p, hook, s.Effective())
	if err != nil {
		return 0, 0, err
	}
	if tl.Exit.IsZero() {
		return 0, 0, errors.New("kubeletsim: the process did not exit")
	}
	return tl.SIGTERM.Sub(tl.Start), tl.Exit.Sub(tl.Start), nil
}
