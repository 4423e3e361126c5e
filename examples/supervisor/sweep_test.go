//go:build linux

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/drainkit/drainkit/pause"
)

// The final sweep's account merged into the preserve phase's: a sandbox
// the phase preserved and the sweep found running again takes the sweep's
// outcome (preserved again, or lost), one more relisting and the attempts
// of both; one the sweep's pause found already paused (gone) stays
// preserved; one created after the phase gets its own entry, listed by
// the pass after the phase's; the counts are of the merged entries.
func TestSweepIsMergedIntoThePreservePhasesAccount(t *testing.T) {
	phase := &pause.Report{Passes: 2, Entries: []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 2, Relisted: 1},
		{ID: "c", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "d", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
	}, Counts: map[pause.Outcome]int{pause.Preserved: 4}}
	sweep := &pause.Report{Passes: 2, Entries: []pause.Entry{
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "c", Outcome: pause.TimedOut, Pass: 1, Attempts: 1, Error: "deadline"},
		{ID: "d", Outcome: pause.Vanished, Pass: 1, Attempts: 1, Error: "gone"},
		{ID: "e", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
	}}
	mergeSweep(phase, sweep)

	assert.Equal(t, []pause.Entry{
		{ID: "a", Outcome: pause.Preserved, Pass: 1, Attempts: 1},
		{ID: "b", Outcome: pause.Preserved, Pass: 1, Attempts: 3, Relisted: 2},
		{ID: "c", Outcome: pause.TimedOut, Pass: 1, Attempts: 2, Relisted: 1, Error: "deadline"},
		{ID: "d", Outcome: pause.Preserved, Pass: 1, Attempts: 2, Relisted: 1},
		{ID: "e", Outcome: pause.Preserved, Pass: 3, Attempts: 1},
	}, phase.Entries)
	assert.Equal(t, map[pause.Outcome]int{pause.Preserved: 4, pause.TimedOut: 1}, phase.Counts)
	assert.Equal(t, 1, phase.Lost())
	assert.Equal(t, 4, phase.Passes)
}
