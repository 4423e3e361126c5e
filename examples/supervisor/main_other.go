//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "supervisor: Linux only")
	os.Exit(2)
}
