package vmtest

import (
	"os"
	"strings"
	"testing"
)

// The guest's /init and the host talk through the serial console only.
// Every line /init writes starts with one of these markers, so kernel
// messages on the same console cannot be mistaken for results.
const (
	outputMarker = "vmtest| "      // one line of the guest test binary's output
	kmsgMarker   = "vmtest-kmsg| " // one line of the guest's kernel log, dumped at the end
	statusMarker = "vmtest: "      // ready / exit / error lines of /init itself
)

// powerOffRequest is the line a guest test writes (PowerOff) to have /init
// end the machine once it has relayed every line written before it.
const powerOffRequest = "vmtest-power-off-request"

// Paths inside the initramfs.
const (
	guestConfigPath = "/vmtest/config.json"
	guestModuleDir  = "/modules"
)

// guestEnv is set in the environment of the guest test process; its value
// is the guest's kernel release.
const guestEnv = "DRAINKIT_VMTEST_GUEST"

// guestConfig is what the host tells /init: which modules to load and how
// to run the test binary.
type guestConfig struct {
	Modules []string `json:"modules"` // paths inside the initramfs, loaded in order
	Args    []string `json:"args"`    // test binary flags (-test.v, -test.run, ...)
	Env     []string `json:"env"`     // extra KEY=VALUE pairs for the test process
}

// InGuest reports whether the calling test process runs inside a vmtest
// guest, started by the guest's /init.
func InGuest() bool { return os.Getenv(guestEnv) != "" }

// GuestOnly skips t unless it runs inside the guest. Guest tests start with
// it so that a plain `go test` on the host lists them as skipped while the
// host-side test (see RunGuestTests) runs them in the VM.
func GuestOnly(t testing.TB) {
	t.Helper()
	if !InGuest() {
		t.Skip("guest test: runs inside the QEMU guest, started by the package's host test through vmtest.RunGuestTests")
	}
}

// kernelProblemMarks are what the kernel prints when something went wrong
// inside it: a BUG, a WARN_ON, an oops, a panic, a lockup or a task stuck
// in D state.
var kernelProblemMarks = []string{
	"BUG:", "WARNING:", "Oops", "Kernel panic", "general protection fault",
	"Call Trace:", "soft lockup", "hard LOCKUP", "blocked for more than",
}

// KernelProblems returns the lines of a kernel log that report a kernel
// bug, warning, oops, panic, lockup or hung task.
func KernelProblems(log []string) []string {
	var out []string
	for _, l := range log {
		for _, m := range kernelProblemMarks {
			if strings.Contains(l, m) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}
