//go:build linux

package proc_test

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"

	"github.com/drainkit/drainkit/internal/proc"
)

// Pin a child with a pidfd, stop it and see its exit; its parent reaps it.
func ExampleOpen() {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return
	}
	p, err := proc.Open(cmd.Process.Pid)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	_ = p.Signal(syscall.SIGTERM)
	fmt.Println(p.Wait(context.Background()), p.Exited())
	fmt.Println(cmd.Wait())
	// Output:
	// <nil> true
	// signal: terminated
}
