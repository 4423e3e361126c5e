// Package gaterefusals is the account of the work a drain's gate refused (the
// gate phase's Detail in drain's Report, row 1015) and the one way it is
// said, "http create 3": drain builds it and writes its log line from it,
// and internal/termmsg reads it back, from a Report or from the Report's
// JSON, for the termination message's line (row 1081). One type and one
// rule, where termmsg's copy of the Detail's JSON and of drain's
// formatting could have drifted from drain's; and no exported name in
// drain.
//
//	d, ok := gaterefusals.Read(detail) // the gate phase's Detail, from a Report or its file
//	if ok && d.Refused > 0 {
//		fmt.Println(strings.Join(d.Kinds(), ", "))
//	}
//
// A refusal no phase of the drain ran at (a gate the server's own code
// closed before Shutdown) has no phase in the Detail, and PhaseName and
// During name it "before the drain" for the log line and the termination
// message alike (row 1153).
//
// Guarantees: Read gives the same Detail for the value drain made and for
// that value read back from its JSON (a Report file); Kinds is in the
// order of way, then class, whichever map order the counts came in.
package gaterefusals
