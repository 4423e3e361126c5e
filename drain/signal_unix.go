//go:build unix

package drain

import "syscall"

// ignoredByDefault is a signal whose default action is to be ignored, which package
// drain's init catches for a moment to start os/signal's goroutines (server.go).
const ignoredByDefault = syscall.SIGWINCH
