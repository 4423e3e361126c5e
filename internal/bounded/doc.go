// Package bounded calls a function that may ignore its context, and stops
// waiting for it a fixed slack after the context ends (of the time the
// process ran: see Call): drainkit's one "abandon a call" mechanism, for
// the Lister, the Preserver and the drain's steps. A panic in the function is recovered and returned as an error with
// its stack, so a user's bug ends in the Report, not in a crashed process.
//
// An abandoned call's goroutine keeps running until the function returns;
// nothing can stop a function that ignores its context, and the process is
// about to exit anyway. The result is dropped.
//
//	report, err := bounded.Call(ctx, 100*time.Millisecond, preserver.Run)
//	if errors.Is(err, bounded.ErrAbandoned) { ... }
package bounded
