// Package satdur adds durations that must not wrap: the reserves and
// rounds of a plan, whose sum with an absurd estimate (hours times
// thousands of sandboxes) would pass the largest time.Duration and turn
// negative, a plan that fits. Package deadline's plan, drainkit plan and
// internal/gracefit share it.
//
//	total := satdur.Add(total, reserve) // at most the largest Duration
package satdur
