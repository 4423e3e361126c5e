package main

import (
	"context"
	"fmt"
	"os"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
)

// sandboxd is server.Main behind PID 1's duties. A manifest whose grace
// the kubelet would not honour is refused at start, naming the flag, with
// exit status 2, before anything listens or a sandbox is taken.
func Example_badGrace() {
	code := server.Main(context.Background(), []string{"-grace", "1s", "-state-dir", os.TempDir()}, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// sandboxd: -grace 1s is below the kubelet's 2 s minimum
	// exit status 2
}
