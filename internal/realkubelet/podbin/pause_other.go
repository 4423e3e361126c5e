//go:build !unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// pause is the sandbox's PID 1 on Unix; elsewhere it only waits for SIGINT or SIGTERM:
// no process is re-parented to it there.
func pause() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	return 0
}
