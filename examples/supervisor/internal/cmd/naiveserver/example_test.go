package main

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/examples/supervisor/internal/naiveserver"
)

// The command is naiveserver.Main with the process's arguments: a bad flag
// value is refused with its usage and exit status 2.
func Example_badFlag() {
	code := naiveserver.Main([]string{"-pause", "soon"}, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// invalid value "soon" for flag -pause: parse error
	// Usage of naiveserver:
	//   -daemon string
	//     	device daemon command to start as a child
	//   -listen string
	//     	API address (default "127.0.0.1:8080")
	//   -pause duration
	//     	time one pause takes (default 500ms)
	//   -state string
	//     	state directory (required)
	// exit status 2
}
