package main

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

func main() {
	cfg, err := fakeublk.ParseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(fakeublk.RunDaemon(cfg, os.Stdout))
}
