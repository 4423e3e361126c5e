//go:build !unix

package drain

import "syscall"

// ignoredByDefault is a signal that package drain's init catches for a moment to start
// os/signal's goroutines (server.go): SIGHUP, which Windows never delivers (it delivers
// SIGINT and SIGTERM alone), so catching it takes nothing from anyone.
const ignoredByDefault = syscall.SIGHUP
