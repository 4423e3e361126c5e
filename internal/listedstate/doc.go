// Package listedstate lets the supervisor read the state a
// pause/httpsource.Source's listing gave each sandbox it listed, without an
// exported name in httpsource (the public surface is capped). Package
// httpsource installs Of when it is initialised, as package drain installs
// gatevia.EnterGRPC; a server never uses it.
//
// In front of AgentENV, whose unfiltered listing shows a sandbox in a
// transition (being paused, snapshotted or forked) as paused, the final
// sweep tells those from the running ones by the state its listing of
// every sandbox gave, where it fetched the same listing a second time:
//
//	all, err := allSource.List(ctx) // httpsource.Config{NoStateField: true}
//	for _, sb := range all {
//		state, ok := listedstate.Of(sb)
//		shown := !ok || strings.EqualFold(state, "paused")
//		...
//	}
//
// Guarantees: in a program that links httpsource, Of gives the value of
// the state field (httpsource.Config.StateField, "state" by default, read
// with Config.NoStateField too) of the element that listed the sandbox;
// false for an element without one that is a string or number, and for a
// sandbox no Source's List returned. A program that does not link
// httpsource has no such sandbox, and Of panics saying so.
package listedstate
