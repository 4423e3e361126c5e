package listedstate

import "github.com/drainkit/drainkit/pause"

// Of returns the state the listing gave sb, a sandbox an httpsource.Source's
// List returned, and true; "" and false when its element had no state that
// is a string or number, or sb is no such sandbox. Package httpsource sets
// it when it is initialised; until then (in a program that does not link
// httpsource) it panics saying so.
var Of func(sb pause.Sandbox) (state string, ok bool) = notInstalled

// notInstalled is Of in a program that does not link httpsource: a call is
// a bug of its caller, which a nil function's call would report as a nil
// pointer dereference naming neither package.
func notInstalled(pause.Sandbox) (string, bool) {
	panic("listedstate: Of in a program without package pause/httpsource, which installs it when it is initialised: " +
		"only the sandboxes a httpsource.Source lists have a listed state")
}
