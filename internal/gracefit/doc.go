// Package gracefit finds the smallest grace period that drain.New takes for
// a given work: the one rule by which drain.NewServer's refusal names the
// grace to set and drainkit plan prints "smallest grace that fits", so the
// two never name different numbers. The check is New's own
// (deadline.Plan.Shortfall over a budget made by deadline.New before any
// event), the search a bisection over whole seconds, as the kubelet counts
// a grace period.
//
//	least := gracefit.Smallest(deadline.Config{Margin: m, PreStopSleep: s},
//		func(b *deadline.Budget) []deadline.Phase { return phases })
//	// 0: none up to gracefit.Max
//
// Guarantees: Smallest returns a grace that Shortfall says fits and whose
// second less does not (a longer grace never fits less), or 0.
package gracefit
