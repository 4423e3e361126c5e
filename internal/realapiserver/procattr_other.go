//go:build !linux

package realapiserver

import "os/exec"

// neverOutliveTheTest does nothing outside Linux, which alone has a parent-death signal:
// the test's cleanup stops the process, a test binary killed leaves it running.
func neverOutliveTheTest(*exec.Cmd) {}
