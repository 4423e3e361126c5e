package main

import (
	"context"
	"os"

	"github.com/drainkit/drainkit/examples/sandboxd/server"
	"github.com/drainkit/drainkit/internal/fakeublk"
)

func main() {
	fakeublk.MainIfDaemon() // this binary is also the fake device daemon it starts
	os.Exit(server.Main(context.Background(), os.Args[1:], os.Stderr))
}
