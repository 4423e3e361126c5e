//go:build linux

package main

import (
	"fmt"
	"io"

	"github.com/drainkit/drainkit/deadline"
)

// How the supervisor splits AgentENV's 3600 s budget: a safety margin
// before SIGKILL, then a reserve for the server's own exit and one for the
// daemon's teardown; the preserve phase's reserve follows the running
// sandboxes live, and the preStop wait gets the rest.
func Example_budget() {
	cfg, err := parseArgs([]string{"-grace", "3600s", "-concurrency", "16", "--", "/usr/local/bin/agentenv-server"}, io.Discard)
	if err != nil {
		panic(err)
	}
	fmt.Println("server:", cfg.server)
	budget, err := deadline.New(cfg.grace, deadline.Config{}) // as the supervisor makes it
	if err != nil {
		panic(err)
	}
	fmt.Println("margin before SIGKILL:", budget.Margin())
	fmt.Println("server step reserve:", stepReserve(cfg.grace))
	fmt.Println("daemon step reserve:", stepReserve(cfg.grace))
	// Output:
	// server: [/usr/local/bin/agentenv-server]
	// margin before SIGKILL: 5s
	// server step reserve: 30s
	// daemon step reserve: 30s
}
