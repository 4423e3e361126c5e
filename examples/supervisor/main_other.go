//go:build !linux

// Command supervisor is a drain-aware PID 1 for a sandbox node container.
// It runs on Linux only (it reaps children with wait4 and uses
// PR_SET_CHILD_SUBREAPER and Pdeathsig).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "supervisor: Linux only")
	os.Exit(2)
}
