// Command nodrain calls gatevia.EnterGRPC in a program that does not link
// package drain, for gatevia's test of what that does: it prints the panic
// and exits 1.
package main

import (
	"fmt"
	"os"

	"github.com/drainkit/drainkit/internal/gatevia"
)

func main() {
	defer func() {
		fmt.Println("panic:", recover())
		os.Exit(1)
	}()
	_, _ = gatevia.EnterGRPC(nil, "create")
}
