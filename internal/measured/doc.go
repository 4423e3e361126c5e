// Package measured is the one rule by which a preserve is a measurement of
// the concurrency it ran at. pause's adaptive limit feeds its climber a
// sample from such a preserve, and from the first one its Preserver's
// Limit reports the level it measured, not the 1 a plan may count on
// before; the supervisor reads, from the Preserver's Report, whether its
// drain measured one, to start its final sweep at that level or at the
// adaptive limit's start. Two copies of the rule could disagree on a
// sandbox preserved again, and the sweep then start at a level the drain
// never measured.
//
// A preserve is one when it was preserved at its first attempt, took
// time, and is not a preserve again of a sandbox a later listing showed
// running again (a round trip when the listing lagged the pause, or what
// changed since a resume: neither says how long a preserve takes):
//
//	sample := measured.Sample(measured.Preserve{Preserved: e.Outcome == pause.Preserved,
//		Attempts: e.Attempts, Relisted: e.Relisted, Took: e.Duration})
//
// The package depends on nothing of pause's, which imports it.
package measured
