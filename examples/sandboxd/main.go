package main

import (
	"context"
	"os"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/pid1"
)

func main() {
	pid1.Init()             // as PID 1 of the pod's PID namespace: reap runsc's orphans, forward signals
	fakeublk.MainIfDaemon() // this binary is also the fake device daemon it starts
	os.Exit(server.Main(context.Background(), os.Args[1:], os.Stderr))
}
