// Package ublkaccount is what an operator reads of the ublk teardown
// without its JSON: its verdict, its devices and its Note (why it ended as
// it did: the ublk_drv module not loaded, a daemon gone before it was
// asked, a recovery given up), read back from a drain step's Detail, the
// *ublk.Report the step returned or that Report read from a Report file,
// where Detail is a map. internal/termmsg puts its line in the pod's
// termination message and drainkit report in its summary, one rule for
// both, as internal/gaterefusals is for the gate's refusals.
//
//	for _, p := range rep.Phases {
//		if a, ok := ublkaccount.Read(p.Detail); ok {
//			fmt.Println(a.Line(p.Name)) // "ublk teardown: nothing_to_do, no device: no ublk devices (...)"
//		}
//	}
//
// Guarantees: Read gives the same Account for the Report a step made and
// for that Report read back from its JSON; a Detail that is no ublk
// teardown's (a final sweep's *pause.Report, the gate's refusals) is not
// read as one.
package ublkaccount
