package untilexit

import (
	"os"
	"os/signal"
	"slices"
)

// caught is the one channel that keeps the signals caught until the process exits,
// whoever called Keep. Nobody reads it: os/signal sends to it without blocking and
// drops a signal that does not fit.
var caught = make(chan os.Signal, 1)

// Keep keeps every signal of sigs but SIGINT (os.Interrupt) caught from now until the
// process exits: one that comes is dropped, where its default action would end the
// process. Call it only in a process that exits once its server is done (not in a
// caller that goes on: the signal would be dropped there too), and before the caller's
// own registration of the signal stops, or the signal has its default action in
// between. Calling it again adds signals; none is ever released but by signal.Reset.
// With no signal left to keep it does nothing (signal.Notify with none would catch
// every signal).
func Keep(sigs ...os.Signal) {
	keep := slices.DeleteFunc(slices.Clone(sigs), func(s os.Signal) bool { return s == os.Interrupt })
	if len(keep) > 0 {
		signal.Notify(caught, keep...)
	}
}
