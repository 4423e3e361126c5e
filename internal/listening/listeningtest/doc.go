// Package listeningtest gives tests the Unix socket names that the kernel's
// socket table (/proc/net/unix) shows otherwise than Go names them: the
// names a reader of the table must still find (internal/listening,
// docs/faults.md row 2586), and must not take for no listener's
// (drain/draingrpc's held Stop, row 2583). Both packages' tests take them
// from here, so that a name found odd later is tried by both.
//
//	for odd, name := range listeningtest.UnixNamesShownOtherwise(t, "drainkit", "agent") {
//		ln, err := net.Listen("unix", name)
//		...
//	}
package listeningtest
