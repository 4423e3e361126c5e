package pause_test

// runHelperProcess is replaced by the escalation tests' helper; until then
// the test binary is never a helper.
func runHelperProcess() bool { return false }
