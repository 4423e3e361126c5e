//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"
)

// pause is the sandbox's PID 1: it only waits, and reaps what is
// re-parented to it.
func pause() int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return 0
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}
