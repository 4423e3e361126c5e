package main

import (
	"context"
	"os"
)

// The summary of a drain in which every sandbox was preserved: sandboxd
// with twelve sandboxes and a 10 s grace period, the preStop wait ended at
// its deadline, SIGTERM preserved four at a time.
func Example_report() {
	run(context.Background(), []string{"report", "testdata/sandboxd-clean.json"}, os.Stdout, os.Stderr)
	// Output:
	// Termination  T0 2026-12-01 09:11:21.471 UTC (anchored by preStop), grace 10s
	//              SIGTERM +6.587s, deadline +9.087s (margin 1.500s), SIGKILL due +10.587s
	// Verdict      all 12 sandboxes preserved; finished 2.858s before SIGKILL
	// preStop      waited 6.581s for 12 running sandboxes; ended: deadline
	//
	// Phases (times from T0)
	//   phase     start    end      took    deadline  hard     reserve  short  result
	//   drain     +0.000s  +6.581s  6.581s  +6.581s   -        -        -      timed_out: deadline
	//   gate      +6.587s  +6.587s  0.000s  +7.167s   +8.337s  -        -      ok
	//   preserve  +6.587s  +7.625s  1.038s  +8.337s   -        1.170s   -      ok
	//   ublk      +7.625s  +7.729s  0.103s  +8.837s   +9.087s  0.500s   -      ok
	//   http      +7.729s  +7.729s  0.000s  +9.087s   -        0.250s   -      ok
	// Devices      ublk teardown: stopped cleanly, 2 devices (kernel 6.18.44-fc-v1045, vulnerable): ublkb0 stopped cleanly, ublkb1 stopped cleanly
	//
	// Sandboxes    12 listed in 2 pass(es), concurrency limit 4 at the end
	//   outcome    count  p50     p90     max
	//   preserved     12  0.363s  0.394s  0.396s
}
