// Package pause preserves the sandboxes of a terminating node in parallel,
// inside the time the node has left, and accounts for every one of them.
// Preserving them one at a time, as sandbox servers do today, needs N x
// (pause time) after SIGTERM, and whatever is not reached before SIGKILL is
// lost.
//
// A server implements Sandbox (an ID and a Preserve that pauses and
// persists) over its runtime, optionally Estimated, Sized (its memory size,
// the prior of its estimate) and Prioritized, and a
// Lister that returns the sandboxes still needing it. Typical wiring, in the
// SIGTERM path:
//
//	preserver, err := pause.New(pause.ListFunc(server.RunningSandboxes), pause.Config{
//		Estimator: deadline.NewEstimator(2 * time.Second),
//		Logger:    logger,
//		// no Limit: it adapts, from 8, between 1 and 32;
//		// no CancelAtDeadline: a pause is never aborted halfway.
//	})
//	...
//	ctx, cancel := plan.Context(ctx, "preserve")
//	defer cancel()
//	report := preserver.Run(ctx, budget.Deadline())
//	logger.Info("preserve done", "preserved", report.Counts[pause.Preserved], "lost", report.Lost())
//
// How a Run works: it lists the sandboxes, orders the new ones (priority
// first, then FIFO, shortest first or longest first, chosen from the
// estimates and the time left), and preserves them with at most Limit at a
// time: workers hold slots of a golang.org/x/sync/semaphore and take the
// sandboxes in order. Unless Config.Limit fixes it, the limit adapts: it
// measures the node's throughput (bytes per second when sandboxes are
// Sized) and moves toward the smallest limit past which more preserves at
// once stop paying, never below 1 or above Config.MaxLimit, and stops
// exploring when the deadline binds or too little work is left to use what
// it would find. Given a Config.Limit with a MaxLimit (the Report.LearnedLimit
// of the node's last drain), the first epoch checks it and the limit moves
// straight to it (see Config.Limit). It follows TCP's slow start and BBR's startup (double
// while the delivered throughput grows; while it climbs, a pass OrderAuto
// orders longest first starts its shortest preserves, whose completions
// come soonest), then holds with BBR-style probes a quarter up and down, moving
// on the throughput two levels delivered, not on latency as Vegas,
// Gradient2 (Netflix concurrency-limits) and AIMD do: a preserve's latency
// grows with its size, so no no-load latency exists to compare with. Transient errors are retried
// with backoff inside the time left, by default for as long as a retry fits
// before the deadline (5 minutes only in a Run with none); a listing's or a Preserve's error may
// name the time to try again (a Retry-After), and an error may end the
// wait early when its cause went away (see Lister and Sandbox). After a pass it lists again, to catch a
// sandbox that turned running meanwhile (also one it preserved and a user
// resumed: preserved again, and counted in its entry's Relisted), and
// stops when a pass finds nothing to preserve.
//
// Guarantees. No preserve starts after the phase deadline (the deadline of
// Run's context), and waiting for a slot gives up at it. A listing call
// not answered in half the time left to it gets a second call beside it,
// the first answer taken, a failure only once both failed (see Lister):
// one hung call does not hold a pass to the deadline. Running preserves
// are left to run until the hard deadline or, with Config.CancelAtDeadline,
// cancelled at the phase deadline. Run returns by the later of the two deadlines
// even if a Preserve or the Lister ignores its context; such a preserve is
// reported TimedOut (and with Config.SandboxTimeout it is abandoned, and its
// slot reused, a second after its own bound). A Preserve abandoned that
// returns before Run makes its Report is reported as it returned: the
// Report is the sandboxes' state when Run returns. No preserve starts while
// as many as the current limit run (abandoned ones apart); a lowered limit
// lets the running ones finish. The limit never leaves [1, maximum]. No retry starts whose backoff wait would end past
// the phase deadline or the sandbox's deadline. A panicking Preserve is recovered and reported
// with its stack, as is one that ends its goroutine (runtime.Goexit), or whose
// error's RetryAt, Config.Permanent or Config.BackOff policy ends it; so is a panicking Lister, or one that ends its goroutine
// (runtime.Goexit), whose listing is retried (with
// the sandboxes it returned, when its error's Error or Unwrap panicked:
// such an error is its panic, as it is a Preserve's). The log handler,
// span or meter that panics or ends its goroutine as a sandbox settles
// holds no Run: the sandbox stays settled, the next one and the slot go
// on, and the Run says so once at Error, with the stack. A
// typed nil error (a nil *T returned as an error) is a permanent failure:
// the Preserve's sandbox Failed, the Lister's listing failed after the
// sandboxes it gave; its methods, which would dereference the nil, are
// not called. The
// Report has exactly one entry for every sandbox any pass listed, and one
// Failed entry for every flawed element of a listing (nil, an empty or
// repeated ID, an ID that panics). A Run whose every listing failed is
// Unknown: Report.Err says so with the last error, whatever the counts;
// the sandboxes a failed listing returned with its error are preserved,
// and such a Run is Incomplete instead (see Lister). With tracing off (the global no-op providers), a Run makes a
// few allocations per pass and none per sandbox.
//
// Telemetry, under the instrumentation scope ScopeName: a "pause.Run" span
// with a "pause.Preserve" child per sandbox (see Config.TracerProvider), and
// the metrics drainkit.pause.preserve.duration (histogram, s: from a
// sandbox's first attempt to its outcome, 5 ms to 2 h buckets),
// drainkit.pause.sandboxes (counter, {sandbox}, one per sandbox accounted
// for by a Run, and one more each time a sandbox listed again is; each
// Run counts its own, so a sandbox one Run left not started and a later
// Run preserved counts under both: drain's drainkit.drain.outcomes is a
// drain's final account; a sandbox abandoned while its Preserve ran counts
// when the Report is made, by the outcome the Report gives it, preserved
// if that Preserve returned nil before, and its duration with it)
// and drainkit.pause.preserve.active (up-down counter, {sandbox}: the
// preserves running now), by drainkit.pause.outcome where they have one.
//
// For runtimes that preserve by signalling (a gVisor actor saves its state
// on SIGTERM), package pause/escalate stops the target with a bounded
// SIGTERM, wait, SIGKILL, wait, and its escalate.Sandbox is a Sandbox.
package pause
