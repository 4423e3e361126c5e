package main

import (
	"os"

	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
)

func main() {
	os.Exit(naiveserver.Main(os.Args[1:], os.Stderr))
}
