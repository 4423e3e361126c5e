package main

import (
	"os"
	"time"

	"github.com/drainkit/drainkit/internal/kubeletsim"
)

// The side-by-side table drainsim ends with, for two recorded terminations.
func Example_table() {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	seed := &result{Mode: modeSeed, N: 20, Preserved: 4, Timeline: &kubeletsim.Timeline{
		Start: t0, HookEnd: t0.Add(8 * time.Second), HookKept: true, Remaining: 2 * time.Second,
		KillDue: t0.Add(10 * time.Second), Exit: t0.Add(10 * time.Second), Killed: true}}
	dk := &result{Mode: modeDrainkit, N: 20, Preserved: 20, DaemonClean: true, Timeline: &kubeletsim.Timeline{
		Start: t0, HookEnd: t0.Add(3250 * time.Millisecond), Remaining: 5 * time.Second,
		KillDue: t0.Add(8250 * time.Millisecond), Exit: t0.Add(5830 * time.Millisecond)}}
	printTable(os.Stdout, []*result{seed, dk})
	// Output:
	//                         seed                                 drainkit
	// preStop hook            8.00s, cut off at the grace period   3.25s, returned
	// SIGTERM to SIGKILL      2.00s                                5.00s
	// sandboxes preserved     4/20                                 20/20
	// sandboxes lost          16                                   0
	// device daemon           SIGKILLed, devices live              stopped cleanly
	// server                  SIGKILLed                            exited by itself
	// headroom left at exit   none (killed)                        2.42s
}
