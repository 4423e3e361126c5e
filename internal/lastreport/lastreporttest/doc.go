// Package lastreporttest is the tests' side of internal/lastreport, shared by its
// tests and those of the servers that write their Report with it (sandboxd, the
// supervisor, the gVisor worker).
//
// A Report that cannot be written is tested on a real full file system: a tmpfs of
// its own (Tmpfs), filled up (FillUp), under a server that DrainOnAFullFileSystem
// then terminates and checks. A test that waits for a server's drain to end waits
// for its file to hold the finished Report (Finished), not for the file to exist:
// the account of a drain still running is there from the drain's start. A test that
// SIGKILLs a server mid-drain checks the account it left with ThisDrains.
//
//	reports := lastreporttest.Tmpfs(t, "256k") // skipped where not root
//	lastreporttest.FillUp(t, filepath.Join(reports, "filler"))
//	require.Eventually(t, func() bool { return lastreporttest.Finished(report) }, 20*time.Second, 10*time.Millisecond)
//
// Guarantees: the tmpfs is unmounted when the test ends; the test is skipped, not
// failed, where it cannot be mounted; FillUp fails the test on any error but the full
// file system's.
package lastreporttest
