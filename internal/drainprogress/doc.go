// Package drainprogress lets the servers' code hear a drain's Report as it
// stands while the drain runs, without an exported name in drain: at the
// start of Shutdown's phases and at each phase's end, so that the account
// of the last shutdown (internal/lastreport.Progress) is this drain's from
// its start, and a SIGKILL in its middle leaves what was known then rather
// than an earlier drain's Report. Package drain installs Set when it is
// initialised, as it installs gatevia.EnterGRPC; a server never uses it.
//
//	cfg := drain.Config{Budget: budget, Sandboxes: lister}
//	drainprogress.Set(&cfg, func(rep any, next string) {
//		data, _ := json.Marshal(rep) // a *drain.Report, read before fn returns
//		...
//	})
//	d, err := drain.New(cfg)
//
// Guarantees: fn is called on the goroutine that runs the phases, and the
// drain waits for it: it must be quick (copy or encode, never write a file
// there). rep is a *drain.Report holding the phases ended so far, the
// budget now, the account of what the gate refused until then once the
// gate phase ended (its Detail), and the Preserver's account once the
// preserve phase ended; it is valid only until fn returns. next is the phase that runs next, ""
// after the last. A cfg of any other type than *drain.Config panics, naming
// the type; a program that does not link drain panics saying so.
package drainprogress

import "fmt"

// Set makes the drain built from cfg (a *drain.Config, before drain.New)
// call fn at the start of its phases and at each phase's end.
var Set = func(cfg any, fn func(rep any, next string)) {
	panic(fmt.Sprintf("drainprogress: no drain in this program to set on %T", cfg))
}
